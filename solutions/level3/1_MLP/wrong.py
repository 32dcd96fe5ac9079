# cudal1: expect=incorrect
# Bug: the hand-unrolled network forgets the second ReLU.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, out_features),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.layers[0](x))
        h = self.layers[2](h)
        return self.layers[4](h)
