# cudal1: expect=correct faster
# Suffix sums in one kernel, one 1024-thread block per row, no flips. The block walks the row from
# its end in tiles of 4096 values: each thread loads 4 consecutive values (one float4 when
# aligned), forms their local suffix sums, the block computes exclusive suffix sums of the thread
# totals with warp shuffles (__shfl_down_sync) and one shared-memory pass over the warp totals, and
# a running carry holds the sum of all later tiles. One read and one write of x (~1.6 GB) instead of
# flip, cumsum and flip (~4.8 GB). Inputs are positive, so the different summation order changes
# results only at the 1e-6 relative level.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor reverse_cumsum_rows(torch::Tensor x);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

constexpr int THREADS = 1024;
constexpr int WARPS = THREADS / 32;
constexpr int TILE = THREADS * 4;

// Inclusive suffix sum within a warp: lane l gets the sum over lanes >= l.
__device__ __forceinline__ float warp_suffix(float v, int lane) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float n = __shfl_down_sync(0xffffffffu, v, o);
        if (lane + o < 32) v += n;
    }
    return v;
}

__global__ void __launch_bounds__(THREADS) reverse_cumsum(const float* __restrict__ x, float* __restrict__ y,
                                                          int64_t len, bool vec) {
    __shared__ float warp_total[WARPS];
    __shared__ float warp_after[WARPS];
    __shared__ float tile_total;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float* xr = x + (int64_t)blockIdx.x * len;
    float* yr = y + (int64_t)blockIdx.x * len;
    float carry = 0.0f;  // sum of every value after the current tile
    const int64_t tiles = (len + TILE - 1) / TILE;
    for (int64_t t = tiles - 1; t >= 0; --t) {
        const int64_t base = t * TILE + 4 * (int64_t)tid;
        float v0 = 0.f, v1 = 0.f, v2 = 0.f, v3 = 0.f;
        if (vec && base + 3 < len) {
            const float4 q = *reinterpret_cast<const float4*>(xr + base);
            v0 = q.x; v1 = q.y; v2 = q.z; v3 = q.w;
        } else {
            if (base < len) v0 = xr[base];
            if (base + 1 < len) v1 = xr[base + 1];
            if (base + 2 < len) v2 = xr[base + 2];
            if (base + 3 < len) v3 = xr[base + 3];
        }
        // Local suffix sums of this thread's four values.
        v2 += v3; v1 += v2; v0 += v1;
        const float inc = warp_suffix(v0, lane);
        float after_in_warp = __shfl_down_sync(0xffffffffu, inc, 1);
        if (lane == 31) after_in_warp = 0.0f;
        if (lane == 0) warp_total[warp] = inc;
        __syncthreads();
        if (warp == 0) {
            const float w = lane < WARPS ? warp_total[lane] : 0.0f;
            const float winc = warp_suffix(w, lane);
            float wafter = __shfl_down_sync(0xffffffffu, winc, 1);
            if (lane == 31) wafter = 0.0f;
            if (lane < WARPS) warp_after[lane] = wafter;
            if (lane == 0) tile_total = winc;
        }
        __syncthreads();
        const float add = after_in_warp + warp_after[warp] + carry;
        v0 += add; v1 += add; v2 += add; v3 += add;
        if (vec && base + 3 < len) {
            *reinterpret_cast<float4*>(yr + base) = make_float4(v0, v1, v2, v3);
        } else {
            if (base < len) yr[base] = v0;
            if (base + 1 < len) yr[base + 1] = v1;
            if (base + 2 < len) yr[base + 2] = v2;
            if (base + 3 < len) yr[base + 3] = v3;
        }
        carry += tile_total;
        __syncthreads();  // shared values are rewritten by the next tile
    }
}

torch::Tensor reverse_cumsum_rows(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "reverse_cumsum_rows: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "reverse_cumsum_rows: x must be float32");
    TORCH_CHECK(x.dim() == 2, "reverse_cumsum_rows: x must be 2-D");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t rows = xc.size(0), len = xc.size(1);
    if (rows == 0 || len == 0) return y;
    TORCH_CHECK(rows <= 0x7fffffff, "reverse_cumsum_rows: too many rows");
    const float* xp = xc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool vec = len % 4 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(yp) % 16 == 0;
    reverse_cumsum<<<(unsigned)rows, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(xp, yp, len, vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="cudal1_l1_16_revcumsum_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["reverse_cumsum_rows"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.reverse_cumsum_rows(x)
