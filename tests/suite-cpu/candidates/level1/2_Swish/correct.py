# cudal1: expect=correct
# F.silu is x * sigmoid(x) as one fused kernel; equal within rounding.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)
