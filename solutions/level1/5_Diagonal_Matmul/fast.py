# cudal1: expect=correct faster
# diag(a) @ B only scales row i of B by a[i]. Broadcasting a.unsqueeze(1) * B does that in one
# elementwise pass: O(N*M) work and ~134 MB of traffic instead of building a 64 MB diagonal matrix
# and running an O(N^2 * M) dense product (137 GFLOP). The products are bit-identical: each output
# of the dense product is a[i]*B[i, j] plus exact zeros.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return a.unsqueeze(1) * B
