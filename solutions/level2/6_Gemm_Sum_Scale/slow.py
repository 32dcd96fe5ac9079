# cudal1: expect=correct
# Runs the linear layer on 8 chunks of the batch in a Python loop and concatenates the row sums:
# the same 275 GFLOP as the reference in eight smaller GEMMs, plus eight reductions and a copy.
# Correct, slightly slower.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = [torch.sum(self.linear(chunk), dim=1, keepdim=True) for chunk in torch.chunk(x, 8, dim=0)]
        return torch.cat(parts, dim=0) * self.scale
