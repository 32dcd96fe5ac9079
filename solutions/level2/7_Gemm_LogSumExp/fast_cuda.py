# cudal1: expect=correct faster
# The GEMM stays in cuBLAS (torch.addmm with the bias, fp32, TF32 off). torch.logsumexp then runs
# amax, subtract, exp and sum kernels over the 268 MB product (~1.6 GB of traffic); here one CUDA
# kernel reads each row once into registers (256 threads, float4s, rows up to 8192 wide), takes
# the block max and the sum of exp(y - max) with warp shuffles and writes log(sum) + max. Rows
# that do not fit use a two-pass fallback over global memory. Saves ~0.45 ms of ~3.3 ms. Like
# torch.logsumexp, an infinite row maximum is treated as 0 before subtracting.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor row_logsumexp(torch::Tensor y);"

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

template <int V>
__global__ void __launch_bounds__(THREADS) lse_regs(const float* __restrict__ y, float* __restrict__ out, int cols) {
    __shared__ float red[32];
    const int n4 = cols / 4;
    const float4* yr = reinterpret_cast<const float4*>(y + (int64_t)blockIdx.x * cols);
    float4 v[V];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < n4) {
            v[k] = yr[i];
            m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
        }
    }
    m = block_reduce<true>(m, red);
    if (isinf(m)) m = 0.0f;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < n4) s += (expf(v[k].x - m) + expf(v[k].y - m)) + (expf(v[k].z - m) + expf(v[k].w - m));
    }
    s = block_reduce<false>(s, red);
    if (threadIdx.x == 0) out[blockIdx.x] = logf(s) + m;
}

__global__ void __launch_bounds__(THREADS) lse_generic(const float* __restrict__ y, float* __restrict__ out, int64_t cols) {
    __shared__ float red[32];
    const float* yr = y + (int64_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) m = fmaxf(m, yr[i]);
    m = block_reduce<true>(m, red);
    if (isinf(m)) m = 0.0f;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) s += expf(yr[i] - m);
    s = block_reduce<false>(s, red);
    if (threadIdx.x == 0) out[blockIdx.x] = logf(s) + m;
}

torch::Tensor row_logsumexp(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == at::kFloat && y.dim() == 2, "row_logsumexp: 2-D float32 CUDA tensor expected");
    auto yc = y.contiguous();
    const int64_t rows = yc.size(0), cols = yc.size(1);
    auto out = torch::empty({rows}, yc.options());
    if (rows == 0) return out;
    TORCH_CHECK(cols > 0, "row_logsumexp: empty rows");
    TORCH_CHECK(rows <= 0x7fffffff, "row_logsumexp: too many rows");
    auto stream = at::cuda::getCurrentCUDAStream();
    const float* yp = yc.data_ptr<float>();
    const int64_t n4 = cols / 4;
    const dim3 grid((unsigned)rows);
    if (cols % 4 == 0 && n4 <= THREADS * 8 && reinterpret_cast<uintptr_t>(yp) % 16 == 0) {
        const int c = (int)cols;
        if (n4 <= THREADS) lse_regs<1><<<grid, THREADS, 0, stream>>>(yp, out.data_ptr<float>(), c);
        else if (n4 <= THREADS * 2) lse_regs<2><<<grid, THREADS, 0, stream>>>(yp, out.data_ptr<float>(), c);
        else if (n4 <= THREADS * 4) lse_regs<4><<<grid, THREADS, 0, stream>>>(yp, out.data_ptr<float>(), c);
        else lse_regs<8><<<grid, THREADS, 0, stream>>>(yp, out.data_ptr<float>(), c);
    } else {
        lse_generic<<<grid, THREADS, 0, stream>>>(yp, out.data_ptr<float>(), cols);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="cudal1_l2_7_lse_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["row_logsumexp"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        return _ext.row_logsumexp(y)
