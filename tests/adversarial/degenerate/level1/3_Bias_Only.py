# cudal1: degenerate=constant_across_seeds,input_independent
# Degenerate: the input is multiplied by zero before the linear layer, so only the bias reaches
# the output; it depends on the weights but not on the inputs.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x * 0.0)


def get_inputs():
    return [torch.randn(32, 128)]


def get_init_inputs():
    return [128]
