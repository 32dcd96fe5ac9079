# cudal1: expect=incorrect
# Bug: the branches of the select are swapped, so the slope is applied to the positive values and
# the negative values pass through unchanged.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x * self.negative_slope, x)
