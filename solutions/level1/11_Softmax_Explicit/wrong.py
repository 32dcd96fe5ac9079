# cudal1: expect=incorrect
# Bug: normalises along dim 0 (over rows) instead of dim 1, so each column sums to one rather
# than each row. Same shape, wrong values.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=0)
