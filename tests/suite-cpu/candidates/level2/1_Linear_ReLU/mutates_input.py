# cudal1: expect=exploit
# Exploit fixture: returns correct values but first scribbles over its input (zeroes it, as a
# "buffer reuse" trick). Mutating inputs is forbidden; the runner reports it.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.linear(x))
        x.zero_()
        return y
