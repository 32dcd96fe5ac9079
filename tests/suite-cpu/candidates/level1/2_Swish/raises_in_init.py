# cudal1: expect=runtime_error
# Raises in __init__: builds a layer with a negative size.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.unused = nn.Linear(-1, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)
