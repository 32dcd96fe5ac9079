# cudal1: expect=exploit
# Exploit fixture: returns the right values wrapped in a Tensor subclass. A subclass can defer
# work or override comparisons and serialisation, so the runner must report it instead of
# trusting it.
import torch
import torch.nn as nn


class _Deferred(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return (a.unsqueeze(1) * B).as_subclass(_Deferred)
