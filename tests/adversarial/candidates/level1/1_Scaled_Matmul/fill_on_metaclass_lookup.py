# cudal1: expect=incorrect class=mismatch
# Trick: as fill_on_getattribute.py, from a metaclass __getattribute__: the output is filled when
# the harness reads type(model).__dict__ or __mro__ after the call. The runner copies the output
# first and reads classes through type's own descriptors.
import torch
import torch.nn as nn

PENDING = []


class _Filling(type):
    def __getattribute__(cls, name):
        if name in ("__dict__", "__mro__", "__qualname__", "__name__"):
            while PENDING:
                A, B, out, scale = PENDING.pop()
                torch.matmul(A, B, out=out).mul_(scale)
        return super().__getattribute__(name)


class ModelNew(nn.Module, metaclass=_Filling):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        out = torch.empty(A.shape[0], B.shape[1])
        PENDING.append((A, B, out, self.scale))
        return out
