# cudal1: expect=timeout
# Never returns from its second call on: a convergence loop whose exit condition can never hold.
# (Its first call returns: a first call is build time, as for torch.compile, and has the load
# limit; later calls have the call limit.)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = x * torch.sigmoid(x)
        change = 1.0
        while self.calls > 1 and change > -1.0:
            change = abs(change) * 0.5
        return y
