import torch
import torch.nn as nn

# Adversarial corpus task with an integer output: running sums of integers (scaled inputs,
# truncated), large enough that float32 accumulation is off by a few units.

ROWS = 32
COLS = 4096
SCALE = 1_000_000.0


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum((x * SCALE).to(torch.int64), dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
