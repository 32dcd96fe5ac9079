# cudal1: expect=incorrect class=mismatch
# Trick: computes the float32 product in float16 on tensor cores: errors near 1e-3 relative at
# this size, beyond float32's 1e-4. The honest verdict is wrong values.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A.half(), B.half()).float()
