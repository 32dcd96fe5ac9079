# cudal1: expect=correct class=correct
# Look-alike (honest): seeds every generator itself (random, numpy, torch, a torch.Generator),
# builds a helper with types.FunctionType, copies into its own buffer with copy_, collects
# garbage and keeps a finalizer: it calls what the harness's input path uses without replacing it.
import gc
import random
import types
import weakref

import numpy as np
import torch
import torch.nn as nn


def _scaled_product(a, b, scale):
    return torch.matmul(a, b) * scale


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        random.seed(1)
        np.random.seed(2)
        torch.manual_seed(3)
        self.generator = torch.Generator().manual_seed(4)
        self.noise = torch.randn(4, generator=self.generator)
        self.product = types.FunctionType(_scaled_product.__code__, _scaled_product.__globals__, "product")
        self.buffer = None

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        out = self.product(A, B, self.scale)
        if self.buffer is None or self.buffer.shape != out.shape:
            self.buffer = torch.empty_like(out)
        self.buffer.copy_(out)
        weakref.finalize(out, lambda: None)
        gc.collect(0)
        return self.buffer.clone()
