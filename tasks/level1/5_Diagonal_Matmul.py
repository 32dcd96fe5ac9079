import torch
import torch.nn as nn

# Left-multiplication by a diagonal matrix built from a vector: diag(a) @ B.
# Estimate on an H100 (fp32, no TF32): the dense product is 2*N^3 = 137 GFLOP at ~50 TFLOP/s
# -> ~2.8 ms, plus building the N x N diagonal matrix (64 MiB).

N = 4096


class Model(nn.Module):
    """C = diag(a) @ B with a (N,) and B (N, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.diag(a) @ B


def get_inputs():
    a = torch.randn(N)
    B = torch.randn(N, N)
    return [a, B]


def get_init_inputs():
    return []
