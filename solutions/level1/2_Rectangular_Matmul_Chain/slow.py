# cudal1: expect=correct
# Left to right as in the reference, but the (M, N) intermediate is copied through a transposed
# contiguous layout before the second product: an extra 2 x 134 MB of traffic and a strided
# operand for the second GEMM. Correct, slower.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
        ab = torch.matmul(A, B)
        ab_t = ab.t().contiguous()
        return torch.matmul(ab_t.t(), C)
