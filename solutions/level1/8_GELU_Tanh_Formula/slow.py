# cudal1: expect=correct
# Evaluates the same formula in float64 and casts back: two extra conversion passes and every
# intermediate twice as wide, on a GPU whose fp64 path is also slower. Correct (the float64 result
# rounds to within an ulp of the fp32 reference), slower.
import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.double()
        inner = math.sqrt(2.0 / math.pi) * (d + 0.044715 * torch.pow(d, 3.0))
        return (0.5 * d * (1.0 + torch.tanh(inner))).float()
