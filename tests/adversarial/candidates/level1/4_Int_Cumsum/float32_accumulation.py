# cudal1: expect=incorrect class=mismatch
# Trick: accumulates the integers in float32 (faster on some hardware) and casts back: sums above
# 2^24 lose their last units, off by up to tens, which a float tolerance let through.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = (x * 1_000_000.0).to(torch.int64).to(torch.float32)
        return torch.cumsum(values, dim=1).to(torch.int64)
