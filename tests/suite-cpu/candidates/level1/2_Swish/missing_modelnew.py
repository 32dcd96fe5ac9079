# cudal1: expect=runtime_error
# Defines no ModelNew: the class is misspelled.
import torch
import torch.nn as nn


class ModelNw(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)
