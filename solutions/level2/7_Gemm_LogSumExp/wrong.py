# cudal1: expect=incorrect
# Bug: the hand-written logsumexp subtracts the row maximum for stability but forgets to add it
# back: returns log(sum(exp(y - max))) instead of that plus max.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        m = torch.amax(y, dim=1, keepdim=True)
        return torch.log(torch.sum(torch.exp(y - m), dim=1))
