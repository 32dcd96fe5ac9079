# cudal1: expect=correct no_gain class=correct
# Look-alike (honest): the reference's own computation on the caller's stream, timed the same way as the tricks above.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x) * 2.0 + x
