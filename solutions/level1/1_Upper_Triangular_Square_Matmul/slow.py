# cudal1: expect=correct
# The reference's dense product followed by a redundant torch.triu of the result (already upper
# triangular), which adds a full read and write of the 64 MB output: correct, slightly slower.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        c = torch.matmul(torch.triu(A), torch.triu(B))
        return torch.triu(c).clone()
