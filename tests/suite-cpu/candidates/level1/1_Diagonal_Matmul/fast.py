# cudal1: expect=correct faster
# Broadcasts the row scaling, a.unsqueeze(1) * B: O(N^2) work instead of building an N x N
# diagonal matrix and an O(N^3) product. Faster on a CPU too; bit-identical values.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return a.unsqueeze(1) * B
