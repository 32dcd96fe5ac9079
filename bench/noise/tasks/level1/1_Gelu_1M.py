# Noise bench, ~20 us class: exact (erf) GELU over 2^20 fp32 values.
import torch
import torch.nn as nn

N = 1 << 20


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.nn.functional.gelu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
