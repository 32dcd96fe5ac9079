# cudal1: expect=correct faster
# linear(x) * s + x = s * (x @ W^T) + (x + s * b). One small elementwise pass builds x + s*b, and
# a single cuBLAS addmm with beta=1 and alpha=s accumulates the product into it, so the product
# is written once and never re-read for the scale and the residual add (which cost two more
# passes over the 134 MB output in eager mode). The addmm is in place: out-of-place addmm first
# copies its 134 MB input into a new output, and with that copy this measured 0.99x in the GPU
# window (docs/bench/2026-11-22-gpu-session5). fp32, TF32 off; alpha scaling of an exact power
# of two changes nothing, other differences are rounding-level.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = torch.add(x, self.linear.bias, alpha=self.scale)
        return base.addmm_(x, self.linear.weight.t(), beta=1.0, alpha=self.scale)
