# cudal1: expect=correct faster
# torch.softmax computes the same max-subtracted softmax in one fused kernel per row: ~1.1 GB of
# traffic instead of five eager kernels (~4.3 GB). Rounding-level differences only.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)
