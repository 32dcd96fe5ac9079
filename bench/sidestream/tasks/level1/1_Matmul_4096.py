# Noise bench, >= 2 ms class: a 4096^3 fp32 matrix product (TF32 off: ~137 GFLOP on FP32 units).
import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
