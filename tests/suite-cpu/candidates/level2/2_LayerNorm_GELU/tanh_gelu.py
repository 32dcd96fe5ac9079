# cudal1: expect=incorrect
# Subtly wrong values: the tanh approximation of GELU differs from the exact one by up to ~5e-4,
# above the 1e-4 tolerance for some elements.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.3)
            self.norm.bias.normal_(0.0, 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.norm(x), approximate="tanh")
