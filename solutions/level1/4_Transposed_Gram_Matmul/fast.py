# cudal1: expect=correct faster
# Exploits symmetry of G = A^T A. With 4 block columns, block row I computes only the panel
# G[I, I:] = A[:, I]^T @ A[:, I:] (4+3+2+1 = 10 of 16 blocks, 62.5% of the FLOPs) and the blocks
# below the diagonal are copied from the transposed panels (a few MB of copies). fp32, no TF32.
# G[j, i] then equals G[i, j] exactly; the reference computes it as a separate dot product,
# which differs only by rounding order.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor) -> torch.Tensor:
        n = A.shape[1]
        out = torch.empty((n, n), dtype=A.dtype, device=A.device)
        block = max(1, -(-n // 4))
        for r0 in range(0, n, block):
            r1 = min(n, r0 + block)
            panel = torch.mm(A[:, r0:r1].t(), A[:, r0:])
            out[r0:r1, r0:] = panel
            out[r1:, r0:r1] = panel[:, r1 - r0:].t()
        return out
