import torch
import torch.nn as nn

# Suffix sums along each row (reverse cumulative sum), written as flip, cumsum, flip.
# Inputs are positive (uniform in [0, 1)), as for tail probabilities.
# Estimate on an H100: 201M floats (0.8 GB); three passes that each read and write it:
# ~4.8 GB at ~3 TB/s -> ~1.6 ms (the scan itself runs below bandwidth, so likely more).

ROWS = 6144
COLS = 32768


class Model(nn.Module):
    """y[i, j] = sum_{k >= j} x[i, k]."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x.flip(1), dim=1).flip(1)


def get_inputs():
    x = torch.rand(ROWS, COLS)
    return [x]


def get_init_inputs():
    return []
