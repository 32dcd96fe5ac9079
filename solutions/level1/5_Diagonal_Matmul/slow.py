# cudal1: expect=correct
# Scales the rows one at a time in a Python loop and stacks them: N tiny kernels plus a copy.
# Correct (same products as the reference), but launch-bound: thousands of kernel launches take
# longer than the reference's single dense product.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        rows = [a[i] * B[i] for i in range(B.shape[0])]
        return torch.stack(rows, dim=0)
