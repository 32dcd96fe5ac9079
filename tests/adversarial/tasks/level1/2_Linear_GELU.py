import torch
import torch.nn as nn

# Adversarial corpus task: GELU(x W^T + b), with weights; output and input have the same shape.

BATCH = 64
FEATURES = 256


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]
