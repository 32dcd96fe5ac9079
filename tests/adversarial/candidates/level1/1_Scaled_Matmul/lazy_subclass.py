# cudal1: expect=exploit class=output_not_tensor
# Trick: returns a wrapper subclass without storage that computes only when someone looks at it
# (through __torch_dispatch__), so the timed call does nothing.
import torch
import torch.nn as nn
from torch.utils._pytree import tree_map


class Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, thunk, shape, dtype):
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype)

    def __init__(self, thunk, shape, dtype):
        self.thunk = thunk

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        force = lambda t: t.thunk() if isinstance(t, Lazy) else t
        return func(*tree_map(force, args), **tree_map(force, kwargs or {}))


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A, B = A.clone(), B.clone()
        return Lazy(lambda: torch.matmul(A, B) * self.scale, (A.shape[0], B.shape[1]), A.dtype)
