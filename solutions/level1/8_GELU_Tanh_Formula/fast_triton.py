# cudal1: expect=correct faster
# The whole formula as one Triton kernel: each program loads a block of x, computes
# 0.5*x*(1 + tanh(u)) with u = sqrt(2/pi)*(x + 0.044715*x^3) in registers, and stores y: one read
# and one write (~1.1 GB) instead of the eight eager kernels' ~9.7 GB. It uses the identity
# 0.5*(1 + tanh(u)) = 1/(1 + exp(-2u)), so y = x / (1 + exp(-2u)): one exponential, no
# cancellation in 1 + tanh(u) for negative u, and the right limits (x for large x, -0.0 for
# very negative x, NaN for -inf as the reference gives). fp32 throughout; differences from the
# reference are rounding-level (about 5e-7 at most on inputs up to 100 in magnitude). Its JIT
# compile happens on the first call, which cudal1 makes untimed before the checks (the
# `triton_warmup` phase), off the GPU's timing slot.
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_BLOCK = 4096


@triton.jit
def _gelu_tanh_kernel(x_ptr, y_ptr, n, K: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0)
    u = K * (x + 0.044715 * x * x * x)
    y = x / (1.0 + tl.exp(-2.0 * u))
    tl.store(y_ptr + offsets, y, mask=inside)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, _BLOCK),)
        _gelu_tanh_kernel[grid](x, y, n, K=_SQRT_2_OVER_PI, BLOCK=_BLOCK, num_warps=8)
        return y
