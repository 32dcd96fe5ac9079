# cudal1: expect=incorrect
# Bug: returns the old residual stream (the input x) as the second output instead of the updated
# one, h = x + residual. The first output is right.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.2 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        h = x + residual
        rms = torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return h / rms * self.weight, x.clone()
