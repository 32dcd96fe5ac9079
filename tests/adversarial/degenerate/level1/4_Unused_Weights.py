# cudal1: degenerate=weight_independent
# Degenerate: the layer's output is computed and thrown away; the result depends on the input
# only, so the weights (and the work on them) do not matter.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _ = self.linear(x)
        return torch.tanh(x) * 2.0


def get_inputs():
    return [torch.randn(32, 128)]


def get_init_inputs():
    return [128]
