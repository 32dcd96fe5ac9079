# cudal1: degenerate=constant_across_seeds,input_independent,null_ones,constant_output
# Degenerate: a softmax over a dimension of size 1 is 1 everywhere, whatever the input.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(256, 1)]


def get_init_inputs():
    return []
