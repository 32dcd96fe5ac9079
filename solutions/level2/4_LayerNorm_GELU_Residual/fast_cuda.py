# cudal1: expect=correct faster
# One kernel for x + gelu(layer_norm(x)). One 256-thread block per row; when the row fits (length
# a multiple of 4, at most 8192) each thread holds its float4 share in registers: block sum for
# the mean, block sum of centred squares for the biased variance (two-pass, as accurate as
# PyTorch's Welford), then normalise, affine, exact erf GELU and the residual add, written once.
# ~1.1 GB of traffic instead of ~3.8 GB for layer_norm, gelu and add with two temporaries. Other
# shapes use a fallback that re-reads the row from global memory. Accurate erff/rsqrtf.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor ln_gelu_residual(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <math.h>

constexpr int THREADS = 256;

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = lane < (THREADS / 32) ? red[lane] : 0.0f;
    r = warp_sum(r);
    __syncthreads();
    return r;
}
__device__ __forceinline__ float gelu_erf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }
__device__ __forceinline__ float finish(float v, float mean, float rstd, float w, float b) {
    return v + gelu_erf((v - mean) * rstd * w + b);
}

template <int V>
__global__ void __launch_bounds__(THREADS) ln_gelu_regs(const float* __restrict__ x, const float* __restrict__ w,
                                                        const float* __restrict__ b, float* __restrict__ y,
                                                        int cols, float eps) {
    __shared__ float red[32];
    const int n4 = cols / 4;
    const float4* xr = reinterpret_cast<const float4*>(x + (int64_t)blockIdx.x * cols);
    float4* yr = reinterpret_cast<float4*>(y + (int64_t)blockIdx.x * cols);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4 v[V];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < n4) {
            v[k] = xr[i];
            s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        }
    }
    const float mean = block_sum(s, red) / cols;
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < n4) {
            const float a = v[k].x - mean, c = v[k].y - mean, d = v[k].z - mean, e = v[k].w - mean;
            q += (a * a + c * c) + (d * d + e * e);
        }
    }
    const float var = block_sum(q, red) / cols;
    const float rstd = rsqrtf(var + eps);
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < n4) {
            const float4 ww = w4[i], bb = b4[i];
            float4 o;
            o.x = finish(v[k].x, mean, rstd, ww.x, bb.x);
            o.y = finish(v[k].y, mean, rstd, ww.y, bb.y);
            o.z = finish(v[k].z, mean, rstd, ww.z, bb.z);
            o.w = finish(v[k].w, mean, rstd, ww.w, bb.w);
            yr[i] = o;
        }
    }
}

__global__ void __launch_bounds__(THREADS) ln_gelu_generic(const float* __restrict__ x, const float* __restrict__ w,
                                                           const float* __restrict__ b, float* __restrict__ y,
                                                           int64_t cols, float eps) {
    __shared__ float red[32];
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float* yr = y + (int64_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) s += xr[i];
    const float mean = block_sum(s, red) / cols;
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) { const float d = xr[i] - mean; q += d * d; }
    const float rstd = rsqrtf(block_sum(q, red) / cols + eps);
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) yr[i] = finish(xr[i], mean, rstd, w[i], b[i]);
}

torch::Tensor ln_gelu_residual(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "ln_gelu_residual: CUDA tensors expected");
    TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat,
                "ln_gelu_residual: float32 expected");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "ln_gelu_residual: weight/bias size mismatch");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto y = torch::empty_like(xc);
    if (xc.numel() == 0) return y;
    const int64_t rows = xc.numel() / cols;
    TORCH_CHECK(rows <= 0x7fffffff, "ln_gelu_residual: too many rows");
    auto stream = at::cuda::getCurrentCUDAStream();
    const float* xp = xc.data_ptr<float>();
    const float* wp = wc.data_ptr<float>();
    const float* bp = bc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    auto al = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    const int64_t n4 = cols / 4;
    const float e = static_cast<float>(eps);
    const dim3 grid((unsigned)rows);
    if (cols % 4 == 0 && n4 <= THREADS * 8 && al(xp) && al(wp) && al(bp) && al(yp)) {
        const int c = (int)cols;
        if (n4 <= THREADS) ln_gelu_regs<1><<<grid, THREADS, 0, stream>>>(xp, wp, bp, yp, c, e);
        else if (n4 <= THREADS * 2) ln_gelu_regs<2><<<grid, THREADS, 0, stream>>>(xp, wp, bp, yp, c, e);
        else if (n4 <= THREADS * 4) ln_gelu_regs<4><<<grid, THREADS, 0, stream>>>(xp, wp, bp, yp, c, e);
        else ln_gelu_regs<8><<<grid, THREADS, 0, stream>>>(xp, wp, bp, yp, c, e);
    } else {
        ln_gelu_generic<<<grid, THREADS, 0, stream>>>(xp, wp, bp, yp, cols, e);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="cudal1_l2_4_ln_gelu_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["ln_gelu_residual"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.3)
            self.norm.bias.normal_(0.0, 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.ln_gelu_residual(x, self.norm.weight, self.norm.bias, self.norm.eps)
