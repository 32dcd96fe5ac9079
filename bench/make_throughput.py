"""Writes the throughput bench's batch: one task and 20 distinct candidates, 10 of them custom CUDA
through load_inline (each a different kernel configuration, so each is a separate build), 10 of
them plain PyTorch formulations of the same function.

usage: python make_throughput.py OUT_DIR   (writes OUT_DIR/tasks and OUT_DIR/candidates)
"""
import os
import sys

TASK = '''# Throughput bench task: y = relu(x * scale + bias) over 2^24 fp32 values, per-channel scale and bias.
import torch
import torch.nn as nn

ROWS, COLS = 4096, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(COLS))
        self.bias = nn.Parameter(torch.randn(COLS))

    def forward(self, x):
        return torch.relu(x * self.scale + self.bias)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
'''

CUDA = '''# cudal1: expect=correct
# Fused scale + bias + ReLU in one kernel ({threads} threads per block, {per_thread} elements per thread).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void fused(const float* __restrict__ x, const float* __restrict__ s, const float* __restrict__ b,
                      float* __restrict__ y, long n, int cols) {{
    long base = ((long)blockIdx.x * blockDim.x + threadIdx.x) * {per_thread};
    #pragma unroll
    for (int k = 0; k < {per_thread}; ++k) {{
        long i = base + k;
        if (i < n) {{
            int c = (int)(i % cols);
            float v = x[i] * s[c] + b[c];
            y[i] = v > 0.f ? v : 0.f;
        }}
    }}
}}

torch::Tensor run(torch::Tensor x, torch::Tensor s, torch::Tensor b) {{
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    int cols = (int)xc.size(-1);
    long per_block = {threads}L * {per_thread};
    long blocks = (n + per_block - 1) / per_block;
    fused<<<blocks, {threads}, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), s.contiguous().data_ptr<float>(), b.contiguous().data_ptr<float>(), y.data_ptr<float>(), n, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}}
"""

_ext = load_inline(name="cudal1_tp_{k}", cpp_sources="torch::Tensor run(torch::Tensor x, torch::Tensor s, torch::Tensor b);",
                   cuda_sources=_SRC, functions=["run"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn({cols}))
        self.bias = nn.Parameter(torch.randn({cols}))

    def forward(self, x):
        return _ext.run(x, self.scale, self.bias)
'''

TORCH_BODIES = [
    "torch.relu(x * self.scale + self.bias)",
    "torch.clamp_min(torch.addcmul(self.bias, x, self.scale), 0.0)",
    "torch.relu(torch.addcmul(self.bias, x, self.scale))",
    "(x * self.scale + self.bias).clamp(min=0)",
    "torch.nn.functional.relu(x * self.scale + self.bias)",
    "torch.maximum(x * self.scale + self.bias, torch.zeros((), device=x.device))",
    "torch.relu_(x * self.scale + self.bias)",
    "torch.where(x * self.scale + self.bias > 0, x * self.scale + self.bias, 0.0)",
    "torch.relu(x.mul(self.scale).add_(self.bias))",
    "torch.nn.functional.threshold(x * self.scale + self.bias, 0.0, 0.0)",
]

TORCH = '''# cudal1: expect=correct
# A PyTorch formulation of relu(x * scale + bias), variant {k}.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn({cols}))
        self.bias = nn.Parameter(torch.randn({cols}))

    def forward(self, x):
        return {body}
'''


def main(out):
    stem = "1_Scale_Bias_ReLU"
    tasks = os.path.join(out, "tasks", "level1")
    cands = os.path.join(out, "candidates", "level1", stem)
    os.makedirs(tasks, exist_ok=True)
    os.makedirs(cands, exist_ok=True)
    with open(os.path.join(tasks, stem + ".py"), "w") as f:
        f.write(TASK)
    configs = [(t, p) for t in (128, 256, 512, 1024, 64) for p in (1, 4)]
    for k, (threads, per_thread) in enumerate(configs):
        with open(os.path.join(cands, f"cuda_{k:02d}.py"), "w") as f:
            f.write(CUDA.format(k=k, threads=threads, per_thread=per_thread, cols=4096))
    for k, body in enumerate(TORCH_BODIES):
        with open(os.path.join(cands, f"torch_{k:02d}.py"), "w") as f:
            f.write(TORCH.format(k=k, body=body, cols=4096))


if __name__ == "__main__":
    main(sys.argv[1])
