# cudal1: expect=exploit
# Exploit fixture: computes the right values but in place, into the input B, and returns B
# itself. The output aliases an input and the input is mutated; a harness that compares values
# only, or reuses inputs between calls, would be fooled.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return B.mul_(a.unsqueeze(1))
