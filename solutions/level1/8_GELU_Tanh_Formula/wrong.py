# cudal1: expect=incorrect
# Bug: uses the exact (erf) GELU instead of the tanh approximation the task specifies; the two
# differ by up to ~5e-4 around |x| ~ 2, far outside a 1e-4 tolerance.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)
