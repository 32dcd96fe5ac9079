# cudal1: expect=incorrect
# Bug: confuses Swish with the "quick GELU" approximation and computes x * sigmoid(1.702 * x).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)
