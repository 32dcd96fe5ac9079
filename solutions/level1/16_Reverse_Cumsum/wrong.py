# cudal1: expect=incorrect
# Bug: drops the flips and returns the ordinary prefix sum, sum_{k <= j} x[i, k], instead of the
# suffix sum sum_{k >= j} x[i, k].
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=1)
