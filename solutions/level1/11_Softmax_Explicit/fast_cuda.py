# cudal1: expect=correct faster
# Row softmax in one kernel, one thread block per row. When the row fits (length a multiple of 4,
# at most 8192 floats) each thread keeps its share of the row in registers as float4s: one read
# of x, a block max (warp shuffles, then one value per warp through shared memory), exp(x - max)
# in registers, a block sum, and one write of e / sum. ~1.1 GB of traffic instead of ~4.3 GB for
# the five eager kernels. Other shapes take a three-pass fallback (max, sum, write) over global
# memory. Accurate expf and IEEE division, as in the reference; only the summation order differs.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor softmax_rows(torch::Tensor x);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <math.h>

constexpr int THREADS = 256;

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// Block-wide reduction; every thread gets the result. `red` holds one slot per warp.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? red[lane] : (MAX ? -INFINITY : 0.0f);
    r = MAX ? warp_max(r) : warp_sum(r);
    __syncthreads();  // red may be reused by the next reduction
    return r;
}

template <int V>
__global__ void __launch_bounds__(THREADS) softmax_regs(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float red[32];
    const int n4 = cols / 4;
    const float4* xr = reinterpret_cast<const float4*>(x + (int64_t)blockIdx.x * cols);
    float4* yr = reinterpret_cast<float4*>(y + (int64_t)blockIdx.x * cols);
    float4 v[V];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < n4) {
            v[k] = xr[i];
            m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
        }
    }
    m = block_reduce<true>(m, red);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < n4) {
            v[k].x = expf(v[k].x - m); v[k].y = expf(v[k].y - m);
            v[k].z = expf(v[k].z - m); v[k].w = expf(v[k].w - m);
            s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        }
    }
    s = block_reduce<false>(s, red);
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < n4) {
            float4 o;
            o.x = v[k].x / s; o.y = v[k].y / s; o.z = v[k].z / s; o.w = v[k].w / s;
            yr[i] = o;
        }
    }
}

__global__ void __launch_bounds__(THREADS) softmax_generic(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float red[32];
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float* yr = y + (int64_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) m = fmaxf(m, xr[i]);
    m = block_reduce<true>(m, red);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) s += expf(xr[i] - m);
    s = block_reduce<false>(s, red);
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) yr[i] = expf(xr[i] - m) / s;
}

torch::Tensor softmax_rows(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "softmax_rows: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "softmax_rows: x must be float32");
    TORCH_CHECK(x.dim() == 2, "softmax_rows: x must be 2-D");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t rows = xc.size(0), cols = xc.size(1);
    if (rows == 0 || cols == 0) return y;
    TORCH_CHECK(rows <= 0x7fffffff, "softmax_rows: too many rows");
    auto stream = at::cuda::getCurrentCUDAStream();
    const float* xp = xc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool aligned = reinterpret_cast<uintptr_t>(xp) % 16 == 0 && reinterpret_cast<uintptr_t>(yp) % 16 == 0;
    const int64_t n4 = cols / 4;
    const dim3 grid((unsigned)rows);
    if (aligned && cols % 4 == 0 && n4 <= THREADS * 8) {
        const int c = (int)cols;
        if (n4 <= THREADS) softmax_regs<1><<<grid, THREADS, 0, stream>>>(xp, yp, c);
        else if (n4 <= THREADS * 2) softmax_regs<2><<<grid, THREADS, 0, stream>>>(xp, yp, c);
        else if (n4 <= THREADS * 4) softmax_regs<4><<<grid, THREADS, 0, stream>>>(xp, yp, c);
        else softmax_regs<8><<<grid, THREADS, 0, stream>>>(xp, yp, c);
    } else {
        softmax_generic<<<grid, THREADS, 0, stream>>>(xp, yp, cols);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="cudal1_l1_11_softmax_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["softmax_rows"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.softmax_rows(x)
