# cudal1: expect=incorrect
# Wrong values: forgets the linear layer's bias.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.mm(x, self.linear.weight.t()))
