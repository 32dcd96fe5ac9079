# cudal1: degenerate=constant_across_seeds,input_independent,near_zero,constant_output
# Degenerate: the mean of each row after layer normalisation is zero up to rounding, so a
# candidate returning zeros passes.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.norm = nn.LayerNorm(features, elementwise_affine=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x).mean(dim=-1)


def get_inputs():
    return [torch.randn(64, 512)]


def get_init_inputs():
    return [512]
