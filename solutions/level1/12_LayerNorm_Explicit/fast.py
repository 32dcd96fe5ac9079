# cudal1: expect=correct faster
# F.layer_norm computes mean, biased variance, normalisation and the affine step in one fused
# kernel per row: one read and one write (~1.1 GB) instead of about eight eager kernels and their
# temporaries (~7.5 GB). Same parameters and eps; rounding-level differences only.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.bias = nn.Parameter(0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)
