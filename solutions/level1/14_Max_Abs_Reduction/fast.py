# cudal1: expect=correct faster
# The infinity norm along dim 1 is exactly max |x|: torch.linalg.vector_norm(x, inf, dim=1) does
# it in one reduction kernel that reads x once, without writing an |x| temporary (~1.6 GB of
# traffic instead of ~4.8 GB). Bit-identical results (max is exact).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(x, ord=float("inf"), dim=1)
