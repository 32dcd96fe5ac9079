import torch
import torch.nn as nn

# Row-wise sum of squares: an elementwise square (tensor-sized temporary) then a sum.
# Rows are drawn with different scales so that the output varies strongly between rows.
# Estimate on an H100: 402M floats (1.6 GB); square reads and writes it, the sum reads it again:
# ~4.8 GB at ~3 TB/s -> ~1.6 ms.

ROWS = 98304
COLS = 4096


class Model(nn.Module):
    """y[i] = sum_j x[i, j]^2."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x * x, dim=1)


def get_inputs():
    x = torch.randn(ROWS, COLS) * (0.1 + 2.0 * torch.rand(ROWS, 1))
    return [x]


def get_init_inputs():
    return []
