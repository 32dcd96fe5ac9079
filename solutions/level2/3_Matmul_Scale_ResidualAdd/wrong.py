# cudal1: expect=incorrect
# Bug: adds the residual before scaling, computing (linear(x) + x) * scale, so the residual is
# scaled too.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.linear(x) + x) * self.scale
