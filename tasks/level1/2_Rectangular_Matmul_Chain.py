import math

import torch
import torch.nn as nn

# A chain of three rectangular products, evaluated left to right as written: (A @ B) @ C.
# Estimate on an H100 (fp32, no TF32): 2*M*K*N + 2*M*N*P = 137 + 4.3 GFLOP at ~50 TFLOP/s
# -> ~2.8 ms. B and C are scaled by 1/sqrt(fan-in) so that outputs stay O(1).

M = 8192
K = 2048
N = 4096
P = 64


class Model(nn.Module):
    """D = (A @ B) @ C with A (M, K), B (K, N), C (N, P)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
        return torch.matmul(torch.matmul(A, B), C)


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N) / math.sqrt(K)
    C = torch.randn(N, P) / math.sqrt(N)
    return [A, B, C]


def get_init_inputs():
    return []
