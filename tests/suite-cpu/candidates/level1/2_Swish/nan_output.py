# cudal1: expect=incorrect
# NaN output: a leftover debugging term, sqrt(x) * 0, is NaN wherever x < 0 (0 * NaN is NaN), so
# about half the outputs are NaN while the others are right.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x) + torch.sqrt(x) * 0.0
