# cudal1: degenerate=none
# A healthy task for comparison: the output depends on the inputs and the weights.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(32, 128)]


def get_init_inputs():
    return [128]
