# cudal1: expect=correct
# torch.compile (Inductor; C++ on the CPU) of x * sigmoid(x). Its first call compiles (about 20 s
# on one CPU core), which is build time: the first call has the load limit, not the call limit.
import torch
import torch.nn as nn


def _swish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._swish = torch.compile(_swish)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._swish(x)
