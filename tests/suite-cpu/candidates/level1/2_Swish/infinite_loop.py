# cudal1: expect=timeout
# Never returns: a convergence loop whose exit condition can never hold.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * torch.sigmoid(x)
        change = 1.0
        while change > -1.0:
            change = abs(change) * 0.5
        return y
