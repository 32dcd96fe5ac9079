# cudal1: expect=correct faster
# Every batch element uses the same W, so the batch folds into the rows of one matrix product:
# (BATCH*ROWS, K) @ (K, N). One large cuBLAS SGEMM with M = 16384 tiles the matrix units far
# better than 512 batched products of only 32 rows each, and skips the stride-0 batched
# operand. Same FLOPs, fp32, no TF32; only the GEMM's blocking (and so rounding) differs.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
        batch, rows, k = A.shape
        out = torch.mm(A.reshape(batch * rows, k), W)
        return out.view(batch, rows, W.shape[1])
