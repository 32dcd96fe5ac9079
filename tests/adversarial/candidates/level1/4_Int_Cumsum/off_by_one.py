# cudal1: expect=incorrect class=mismatch
# Trick: an integer result off by one in its last column: compared in float64 with a relative
# tolerance of 1e-4 it passed (the sums reach 10^8). Integer outputs must match exactly.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.cumsum((x * 1_000_000.0).to(torch.int64), dim=1)
        out[:, -1] += 1
        return out
