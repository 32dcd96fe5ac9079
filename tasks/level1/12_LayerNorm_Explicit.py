import torch
import torch.nn as nn

# Layer normalisation over the last dimension, spelled out (mean, centred square, mean, divide,
# affine): about eight eager kernels. Affine parameters are random so that they matter.
# Estimate on an H100: 134M floats (0.54 GB); ~14 tensor-sized reads and writes = ~7.5 GB at
# ~3 TB/s -> ~2.5 ms.

ROWS = 32768
HIDDEN = 4096
EPS = 1e-5


class Model(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * weight + bias, statistics over the last dim."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.bias = nn.Parameter(0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def get_inputs():
    x = torch.randn(ROWS, HIDDEN) * 2.0 + 0.5
    return [x]


def get_init_inputs():
    return [HIDDEN, EPS]
