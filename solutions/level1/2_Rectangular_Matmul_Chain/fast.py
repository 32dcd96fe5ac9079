# cudal1: expect=correct faster
# Re-associates the chain: A @ (B @ C) instead of (A @ B) @ C. With C only 64 columns wide, B @ C
# costs 2*K*N*P = 1.1 GFLOP and A @ (BC) 2*M*K*P = 2.1 GFLOP, against 137 + 4.3 GFLOP for the
# left-to-right order: ~40x fewer FLOPs and no 134 MB intermediate. fp32 throughout; the
# different summation order changes results only by rounding (outputs are O(1)).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, torch.matmul(B, C))
