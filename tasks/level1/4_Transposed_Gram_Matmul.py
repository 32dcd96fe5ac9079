import torch
import torch.nn as nn

# Gram matrix of the columns of A, a transposed-operand product A^T @ A.
# Estimate on an H100 (fp32, no TF32): 2*N*N*K = 275 GFLOP at ~50 TFLOP/s -> ~5.5 ms.
# The result is symmetric, but the dense product computes both halves.

K = 8192
N = 4096


class Model(nn.Module):
    """G = A^T @ A for A of shape (K, N); G is (N, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A.t(), A)


def get_inputs():
    # Non-negative entries: with signed ones the off-diagonal sums cancel to near zero, where any
    # other summation order (panels, chunks, another GEMM kernel) misses the fp32 tolerance of 1e-4.
    A = torch.rand(K, N)
    return [A]


def get_init_inputs():
    return []
