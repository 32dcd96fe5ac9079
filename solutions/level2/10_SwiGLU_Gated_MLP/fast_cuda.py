# cudal1: expect=correct faster
# One cuBLAS GEMM against the two weight matrices stacked ([Wg; Wu], concatenated each call,
# 32 MB) yields gate and up halves side by side in one (B, 2H) tensor; one CUDA kernel then reads
# both halves once and writes silu(g) * u (float4 when H is a multiple of 4). The eager version
# runs two GEMMs, a silu pass (read + write) and a product pass (two reads + write): this removes
# ~0.8 GB of epilogue traffic and one GEMM launch. fp32, TF32 off; silu is g / (1 + exp(-g)) as
# in PyTorch, so only rounding differs.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor silu_mul_halves(torch::Tensor gu);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__global__ void silu_mul_vec4(const float* __restrict__ gu, float* __restrict__ out, int64_t rows, int64_t hidden) {
    const int64_t h4 = hidden / 4;
    const int64_t total = rows * h4;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t r = i / h4, c = i - r * h4;
        const float4* row = reinterpret_cast<const float4*>(gu + r * 2 * hidden);
        const float4 g = row[c], u = row[h4 + c];
        reinterpret_cast<float4*>(out)[i] =
            make_float4(silu_mul(g.x, u.x), silu_mul(g.y, u.y), silu_mul(g.z, u.z), silu_mul(g.w, u.w));
    }
}

__global__ void silu_mul_scalar(const float* __restrict__ gu, float* __restrict__ out, int64_t rows, int64_t hidden) {
    const int64_t total = rows * hidden;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t r = i / hidden, c = i - r * hidden;
        out[i] = silu_mul(gu[r * 2 * hidden + c], gu[r * 2 * hidden + hidden + c]);
    }
}

// gu is (rows, 2*hidden): gate in the first half of each row, up in the second.
torch::Tensor silu_mul_halves(torch::Tensor gu) {
    TORCH_CHECK(gu.is_cuda() && gu.scalar_type() == at::kFloat && gu.dim() == 2, "silu_mul_halves: 2-D float32 CUDA tensor expected");
    TORCH_CHECK(gu.size(1) % 2 == 0, "silu_mul_halves: the second dimension must be even");
    auto g = gu.contiguous();
    const int64_t rows = g.size(0), hidden = g.size(1) / 2;
    auto out = torch::empty({rows, hidden}, g.options());
    if (rows == 0 || hidden == 0) return out;
    const int threads = 256;
    const int64_t max_blocks = (int64_t)at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 16;
    auto stream = at::cuda::getCurrentCUDAStream();
    const float* gp = g.data_ptr<float>();
    float* op = out.data_ptr<float>();
    if (hidden % 4 == 0 && reinterpret_cast<uintptr_t>(gp) % 16 == 0 && reinterpret_cast<uintptr_t>(op) % 16 == 0) {
        const int64_t blocks = std::min<int64_t>((rows * hidden / 4 + threads - 1) / threads, max_blocks);
        silu_mul_vec4<<<(unsigned)blocks, threads, 0, stream>>>(gp, op, rows, hidden);
    } else {
        const int64_t blocks = std::min<int64_t>((rows * hidden + threads - 1) / threads, max_blocks);
        silu_mul_scalar<<<(unsigned)blocks, threads, 0, stream>>>(gp, op, rows, hidden);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="cudal1_l2_10_swiglu_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["silu_mul_halves"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(in_features, hidden, bias=False)
        self.up = nn.Linear(in_features, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = torch.cat([self.gate.weight, self.up.weight], dim=0)
        gu = torch.mm(x, w.t())
        return _ext.silu_mul_halves(gu)
