# cudal1: expect=correct
# Spells sigmoid out as 1 / (1 + exp(-x)): negate, exp, add, reciprocal and two products, six
# elementwise kernels with temporaries instead of two. Same values within rounding, ~2x the
# memory traffic of the reference.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.reciprocal(1.0 + torch.exp(-x))
