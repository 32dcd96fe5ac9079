# cudal1: expect=correct faster
# F.mish computes x * tanh(softplus(x)) in one fused elementwise kernel: one read and one write of
# the 805 MB tensor (~1.6 GB) instead of softplus, tanh and product kernels with two temporaries
# (~5.6 GB), so ~3x less time. For large x both give x (softplus's threshold of 20 and
# log1p(exp(x)) round to the same value); elsewhere the difference is rounding-level.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.mish(x)
