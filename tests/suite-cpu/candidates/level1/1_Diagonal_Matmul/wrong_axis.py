# cudal1: expect=incorrect
# Wrong values: scales the columns (B @ diag(a)) instead of the rows.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return B * a.unsqueeze(0)
