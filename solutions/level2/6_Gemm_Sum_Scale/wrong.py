# cudal1: expect=incorrect
# Bug: the algebraic rewrite sums the weight rows but forgets the summed bias term.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w_sum = self.linear.weight.sum(dim=0)
        return (torch.mv(x, w_sum) * self.scale).unsqueeze(1)
