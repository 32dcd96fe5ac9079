# cudal1: degenerate=null_echo
# Degenerate: clamping normal samples to [-100, 100] changes nothing, so returning the input
# passes.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, -100.0, 100.0)


def get_inputs():
    return [torch.randn(128, 128)]


def get_init_inputs():
    return []
