# cudal1: expect=correct faster
# Block-triangular product. Both factors are upper triangular, so block row I of the result
# needs only triu(A)[I, I:] and triu(B)[I:, I:]: C[I, I:] = triu(A)[I, I:] @ triu(B)[I:, I:],
# and C[I, :I] is zero. With 8 block rows the panels cost sum(m^2, m=1..8) / 8^3 = 40% of the
# dense product's FLOPs, so the cuBLAS work drops ~2.5x (fp32 throughout, no TF32).
# Entries below the diagonal inside each panel come out as exact zeros (every term has a zero
# factor), exactly as in the dense product.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        n = A.shape[0]
        a = torch.triu(A)
        b = torch.triu(B)
        out = torch.empty((n, n), dtype=A.dtype, device=A.device)
        block = max(1, -(-n // 8))
        for r0 in range(0, n, block):
            r1 = min(n, r0 + block)
            out[r0:r1, :r0] = 0
            out[r0:r1, r0:] = torch.mm(a[r0:r1, r0:], b[r0:, r0:])
        return out
