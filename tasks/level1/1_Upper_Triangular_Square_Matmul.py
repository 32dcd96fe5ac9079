import torch
import torch.nn as nn

# Product of the upper-triangular parts of two square matrices.
# Estimate on an H100 (fp32, no TF32): one dense N^3 product, 2*4096^3 = 137 GFLOP at ~50 TFLOP/s
# -> ~2.8 ms, plus two triu passes (~0.1 ms). The zero halves of both factors are multiplied too.

N = 4096


class Model(nn.Module):
    """C = triu(A) @ triu(B) for square A and B."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(torch.triu(A), torch.triu(B))


def get_inputs():
    # Non-negative entries: with signed ones many sums cancel to near zero, where any other
    # summation order (a blocked product, another GEMM kernel) misses the fp32 tolerance of 1e-4.
    A = torch.rand(N, N)
    B = torch.rand(N, N)
    return [A, B]


def get_init_inputs():
    return []
