# cudal1: expect=incorrect
# Bug: broadcasts along the wrong axis, computing B @ diag(a) (column scaling) instead of
# diag(a) @ B (row scaling). Shapes agree because B is square, so only the values are wrong.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return B * a.unsqueeze(0)
