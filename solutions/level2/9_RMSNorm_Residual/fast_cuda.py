# cudal1: expect=correct faster
# The residual add and the RMS norm in one kernel, one 256-thread block per row: h = x + residual
# is formed in registers (float4s, rows up to 8192 wide) and written once, the sum of h^2 is
# reduced with warp shuffles and shared memory, and out = h / sqrt(mean(h^2) + eps) * weight is
# written once. Two reads and two writes (~1.6 GB) instead of ~10 tensor-sized passes (~4 GB) for
# add, pow, mean, sqrt, division and product. Same fp32 operation order as the reference (divide
# by the rms, then multiply by the weight); only the sum's order differs. Other shapes use a
# fallback that re-reads h from global memory.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "std::vector<torch::Tensor> add_rmsnorm(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, double eps);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <math.h>
#include <vector>

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

template <int V>
__global__ void __launch_bounds__(THREADS) rms_regs(const float* __restrict__ x, const float* __restrict__ res,
                                                    const float* __restrict__ w, float* __restrict__ out,
                                                    float* __restrict__ h, int cols, float eps) {
    __shared__ float red[32];
    const int n4 = cols / 4;
    const int64_t off = (int64_t)blockIdx.x * cols;
    const float4* x4 = reinterpret_cast<const float4*>(x + off);
    const float4* r4 = reinterpret_cast<const float4*>(res + off);
    float4* h4 = reinterpret_cast<float4*>(h + off);
    float4* o4 = reinterpret_cast<float4*>(out + off);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    float4 v[V];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < n4) {
            const float4 a = x4[i], b = r4[i];
            v[k] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
            h4[i] = v[k];
            ss += (v[k].x * v[k].x + v[k].y * v[k].y) + (v[k].z * v[k].z + v[k].w * v[k].w);
        }
    }
    const float rms = sqrtf(block_sum(ss, red) / cols + eps);
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * THREADS;
        if (i < n4) {
            const float4 ww = w4[i];
            o4[i] = make_float4(v[k].x / rms * ww.x, v[k].y / rms * ww.y, v[k].z / rms * ww.z, v[k].w / rms * ww.w);
        }
    }
}

__global__ void __launch_bounds__(THREADS) rms_generic(const float* __restrict__ x, const float* __restrict__ res,
                                                       const float* __restrict__ w, float* __restrict__ out,
                                                       float* __restrict__ h, int64_t cols, float eps) {
    __shared__ float red[32];
    const int64_t off = (int64_t)blockIdx.x * cols;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) {
        const float v = x[off + i] + res[off + i];
        h[off + i] = v;
        ss += v * v;
    }
    // Each thread re-reads only the h values it wrote itself, so no barrier is needed for them;
    // block_sum's barriers order everything else.
    const float rms = sqrtf(block_sum(ss, red) / cols + eps);
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) out[off + i] = h[off + i] / rms * w[i];
}

std::vector<torch::Tensor> add_rmsnorm(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.is_cuda() && residual.is_cuda() && weight.is_cuda(), "add_rmsnorm: CUDA tensors expected");
    TORCH_CHECK(x.scalar_type() == at::kFloat && residual.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat,
                "add_rmsnorm: float32 expected");
    TORCH_CHECK(x.sizes() == residual.sizes(), "add_rmsnorm: x and residual must have the same shape");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols, "add_rmsnorm: weight size mismatch");
    auto xc = x.contiguous();
    auto rc = residual.contiguous();
    auto wc = weight.contiguous();
    auto out = torch::empty_like(xc);
    auto h = torch::empty_like(xc);
    if (xc.numel() == 0) return {out, h};
    const int64_t rows = xc.numel() / cols;
    TORCH_CHECK(rows <= 0x7fffffff, "add_rmsnorm: too many rows");
    auto stream = at::cuda::getCurrentCUDAStream();
    const float *xp = xc.data_ptr<float>(), *rp = rc.data_ptr<float>(), *wp = wc.data_ptr<float>();
    float *op = out.data_ptr<float>(), *hp = h.data_ptr<float>();
    auto al = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    const int64_t n4 = cols / 4;
    const float e = static_cast<float>(eps);
    const dim3 grid((unsigned)rows);
    if (cols % 4 == 0 && n4 <= THREADS * 8 && al(xp) && al(rp) && al(wp) && al(op) && al(hp)) {
        const int c = (int)cols;
        if (n4 <= THREADS) rms_regs<1><<<grid, THREADS, 0, stream>>>(xp, rp, wp, op, hp, c, e);
        else if (n4 <= THREADS * 2) rms_regs<2><<<grid, THREADS, 0, stream>>>(xp, rp, wp, op, hp, c, e);
        else if (n4 <= THREADS * 4) rms_regs<4><<<grid, THREADS, 0, stream>>>(xp, rp, wp, op, hp, c, e);
        else rms_regs<8><<<grid, THREADS, 0, stream>>>(xp, rp, wp, op, hp, c, e);
    } else {
        rms_generic<<<grid, THREADS, 0, stream>>>(xp, rp, wp, op, hp, cols, e);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {out, h};
}
"""

_ext = load_inline(
    name="cudal1_l2_9_rmsnorm_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["add_rmsnorm"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.2 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        out, h = _ext.add_rmsnorm(x, residual, self.weight, float(self.eps))
        return out, h
