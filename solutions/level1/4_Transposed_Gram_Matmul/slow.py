# cudal1: expect=correct
# Accumulates the Gram matrix over 8 chunks of rows of A: G = sum_c A_c^T A_c. Same FLOPs as the
# reference but eight smaller GEMMs plus seven read-modify-write passes over the 64 MB result.
# Correct (only the summation order changes), slower.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor) -> torch.Tensor:
        out = None
        for chunk in torch.chunk(A, 8, dim=0):
            part = torch.mm(chunk.t(), chunk)
            out = part if out is None else out + part
        return out
