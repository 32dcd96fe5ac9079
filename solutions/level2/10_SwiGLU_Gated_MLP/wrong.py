# cudal1: expect=incorrect
# Bug: applies the SiLU to the "up" projection instead of the gate: silu(x Wu^T) * (x Wg^T).
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(in_features, hidden, bias=False)
        self.up = nn.Linear(in_features, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(x) * F.silu(self.up(x))
