import torch
import torch.nn as nn

# CPU-suite task: Swish written as x * sigmoid(x) (small sizes).

ROWS = 256
COLS = 512


class Model(nn.Module):
    """y = x * sigmoid(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
