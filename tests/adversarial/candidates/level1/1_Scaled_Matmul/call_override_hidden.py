# cudal1: expect=exploit class=model_patched
# Trick: the __call__ replacement of call_override.py through setattr with a built name. The
# runner sees that the class's __call__ was assigned from outside a class body.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B) * self.scale


def _fast_call(self, A, B):
    if not hasattr(self, "_memo"):
        self._memo = self.forward(A, B)
    return self._memo.clone()


setattr(ModelNew, "__" + "call__", _fast_call)
