# cudal1: expect=incorrect
# Bug: forgets to take the upper-triangular part of B, so the strictly lower part of B leaks into
# every entry of the product (and the result is no longer upper triangular).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(torch.triu(A), B)
