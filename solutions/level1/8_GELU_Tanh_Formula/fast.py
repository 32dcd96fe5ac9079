# cudal1: expect=correct faster
# PyTorch already has this exact function as one fused kernel: F.gelu(x, approximate="tanh")
# computes 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))) per element. One read and one write
# (~1.1 GB) replace eight eager kernels (~9.7 GB). Same formula, rounding-level differences only.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")
