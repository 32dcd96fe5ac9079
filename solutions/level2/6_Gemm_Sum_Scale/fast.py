# cudal1: expect=correct faster
# Algebra: sum_j (x W^T + b)_j = x . (sum_j W_j) + sum_j b_j. Summing the weight's rows first
# turns the 275 GFLOP matrix product into one 64 MB reduction of W and a matrix-vector product
# (torch.addmv, ~134 MB of reads), ~0.1 ms instead of ~5.5 ms. Computed from the parameters on
# every call (nothing cached). fp32; outputs are O(10), and the changed summation order moves
# them by ~1e-5, inside atol = rtol = 1e-4.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w_sum = self.linear.weight.sum(dim=0)
        b_sum = self.linear.bias.sum()
        out = torch.addmv(b_sum.expand(x.shape[0]), x, w_sum)
        return (out * self.scale).unsqueeze(1)
