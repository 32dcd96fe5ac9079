# cudal1: expect=correct faster
# Scale, causal mask and softmax in one kernel, one 128-thread block per row of the (S x S) score
# matrices. Row i (its position inside its matrix) reads only its first i+1 scores, as float4s
# held in registers when S is a multiple of 4 and at most 4096: on average half the input is never
# read. It computes s = score * scale, the block max and sum of exp(s - max) over the visible
# prefix (warp shuffles + shared memory), and writes exp(s - max) / sum there and exact zeros after
# it. ~1.2 GB of traffic instead of ~4.8 GB for scale, mask construction, masked_fill and softmax.
# Same fp32 operations as the reference (product, exp, division); only the sum's order differs.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor causal_softmax(torch::Tensor scores, double scale);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <math.h>

constexpr int THREADS = 128;

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = lane < (THREADS / 32) ? red[lane] : (MAX ? -INFINITY : 0.0f);
    r = MAX ? warp_max(r) : warp_sum(r);
    __syncthreads();
    return r;
}

// Element j of a row at position `pos` is visible when j <= pos.
template <int V>
__global__ void __launch_bounds__(THREADS) causal_regs(const float* __restrict__ x, float* __restrict__ y,
                                                       int seq, float scale) {
    __shared__ float red[32];
    const int64_t row = blockIdx.x;
    const int pos = (int)(row % seq);
    const int n4 = seq / 4;
    const int visible4 = pos / 4 + 1;  // float4 chunks that hold at least one visible element
    const float4* xr = reinterpret_cast<const float4*>(x + row * seq);
    float4* yr = reinterpret_cast<float4*>(y + row * seq);
    float4 v[V];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < visible4) {
            float4 q = xr[i];
            const int j = 4 * i;
            q.x = q.x * scale;
            q.y = (j + 1 <= pos) ? q.y * scale : -INFINITY;
            q.z = (j + 2 <= pos) ? q.z * scale : -INFINITY;
            q.w = (j + 3 <= pos) ? q.w * scale : -INFINITY;
            v[k] = q;
            m = fmaxf(m, fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w)));
        }
    }
    m = block_reduce<true>(m, red);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < visible4) {
            v[k].x = expf(v[k].x - m); v[k].y = expf(v[k].y - m);
            v[k].z = expf(v[k].z - m); v[k].w = expf(v[k].w - m);
            s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        }
    }
    s = block_reduce<false>(s, red);
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < visible4) {
            yr[i] = make_float4(v[k].x / s, v[k].y / s, v[k].z / s, v[k].w / s);
        } else if (i < n4) {
            yr[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
}

__global__ void __launch_bounds__(THREADS) causal_generic(const float* __restrict__ x, float* __restrict__ y,
                                                          int64_t seq, float scale) {
    __shared__ float red[32];
    const int64_t row = blockIdx.x;
    const int64_t pos = row % seq;
    const float* xr = x + row * seq;
    float* yr = y + row * seq;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j <= pos; j += THREADS) m = fmaxf(m, xr[j] * scale);
    m = block_reduce<true>(m, red);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j <= pos; j += THREADS) s += expf(xr[j] * scale - m);
    s = block_reduce<false>(s, red);
    for (int64_t j = threadIdx.x; j < seq; j += THREADS) yr[j] = j <= pos ? expf(xr[j] * scale - m) / s : 0.0f;
}

torch::Tensor causal_softmax(torch::Tensor scores, double scale) {
    TORCH_CHECK(scores.is_cuda() && scores.scalar_type() == at::kFloat, "causal_softmax: float32 CUDA tensor expected");
    TORCH_CHECK(scores.dim() >= 2 && scores.size(-1) == scores.size(-2), "causal_softmax: (..., S, S) expected");
    auto xc = scores.contiguous();
    auto y = torch::empty_like(xc);
    if (xc.numel() == 0) return y;
    const int64_t seq = xc.size(-1);
    const int64_t rows = xc.numel() / seq;
    TORCH_CHECK(rows <= 0x7fffffff, "causal_softmax: too many rows");
    auto stream = at::cuda::getCurrentCUDAStream();
    const float* xp = xc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool aligned = reinterpret_cast<uintptr_t>(xp) % 16 == 0 && reinterpret_cast<uintptr_t>(yp) % 16 == 0;
    const float sc = static_cast<float>(scale);
    const int64_t n4 = seq / 4;
    const dim3 grid((unsigned)rows);
    if (aligned && seq % 4 == 0 && n4 <= THREADS * 8) {
        const int s = (int)seq;
        if (n4 <= THREADS) causal_regs<1><<<grid, THREADS, 0, stream>>>(xp, yp, s, sc);
        else if (n4 <= THREADS * 2) causal_regs<2><<<grid, THREADS, 0, stream>>>(xp, yp, s, sc);
        else if (n4 <= THREADS * 4) causal_regs<4><<<grid, THREADS, 0, stream>>>(xp, yp, s, sc);
        else causal_regs<8><<<grid, THREADS, 0, stream>>>(xp, yp, s, sc);
    } else {
        causal_generic<<<grid, THREADS, 0, stream>>>(xp, yp, seq, sc);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="cudal1_l2_5_causal_softmax_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["causal_softmax"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return _ext.causal_softmax(scores, float(self.scale))
