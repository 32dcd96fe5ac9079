# cudal1: expect=incorrect
# Bug: takes the argmax over the last dimension instead of dim 1 (the class dimension), so the
# result has the wrong shape and meaning.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=-1)
