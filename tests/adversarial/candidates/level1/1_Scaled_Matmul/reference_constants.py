# cudal1: expect=exploit class=tampered_reference
# Trick: shrinks the problem by editing the reference module it shares a process with (M, K, N
# and get_inputs), hoping the harness then times tiny inputs. cudal1 takes inputs from a
# snapshot made before the candidate was imported, and reports the edit.
import sys

import torch
import torch.nn as nn

for _name, _module in list(sys.modules.items()):
    if _name.startswith("_cudal1_reference") and hasattr(_module, "get_inputs"):
        _module.M = _module.K = _module.N = 8
        _module.get_inputs = lambda: [torch.randn(8, 8), torch.randn(8, 8)]


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B) * self.scale
