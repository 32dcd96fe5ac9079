import torch
import torch.nn as nn

# CPU-suite task: left-multiplication by a diagonal matrix, diag(a) @ B (small sizes).

N = 512


class Model(nn.Module):
    """C = diag(a) @ B with a (N,) and B (N, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.diag(a) @ B


def get_inputs():
    return [torch.randn(N), torch.randn(N, N)]


def get_init_inputs():
    return []
