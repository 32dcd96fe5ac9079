# cudal1: expect=incorrect
# Bug: takes the statistics over dim 0 (across rows) instead of the last dimension, a classic
# batch-norm/layer-norm mix-up. Shapes broadcast, values are wrong.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.bias = nn.Parameter(0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=0, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=0, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
