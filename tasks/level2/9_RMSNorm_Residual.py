import torch
import torch.nn as nn

# Pre-norm residual step: h = x + residual, RMS-normalise h, scale by a learned weight.
# Returns the normalised tensor and the new residual stream h (a tuple).
# Estimate on an H100: three 403 MB tensors; ~10 tensor-sized reads and writes = ~4 GB at
# ~3 TB/s -> ~1.4 ms.

ROWS = 24576
HIDDEN = 4096
EPS = 1e-6


class Model(nn.Module):
    """h = x + residual; out = h / sqrt(mean(h^2) + eps) * weight; returns (out, h)."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.2 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        h = x + residual
        rms = torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return h / rms * self.weight, h


def get_inputs():
    x = torch.randn(ROWS, HIDDEN)
    residual = torch.randn(ROWS, HIDDEN) * 2.0
    return [x, residual]


def get_init_inputs():
    return [HIDDEN, EPS]
