# cudal1: expect=correct faster
# One warp per row: each lane squares and accumulates its float4 chunks of the row (four
# independent accumulators for memory-level parallelism), then the lanes combine with warp
# shuffles and lane 0 writes the row's sum. One read of x (~1.6 GB) and no temporary, instead of
# writing and re-reading x*x (~4.8 GB). A scalar path covers row lengths that are not a multiple
# of 4. fp32 accumulation as in the reference; only the summation order differs (~1e-6 relative).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor row_sum_squares(torch::Tensor x);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

constexpr int THREADS = 256;
constexpr int ROWS_PER_BLOCK = THREADS / 32;

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void __launch_bounds__(THREADS) sumsq_vec4(const float* __restrict__ x, float* __restrict__ y,
                                                      int64_t rows, int64_t cols) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= rows) return;
    const float4* xr = reinterpret_cast<const float4*>(x + row * cols);
    const int64_t n4 = cols / 4;
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    int64_t i = lane;
    for (; i + 96 < n4; i += 128) {
        const float4 p = xr[i], q = xr[i + 32], r = xr[i + 64], s = xr[i + 96];
        a0 += p.x * p.x + p.y * p.y + p.z * p.z + p.w * p.w;
        a1 += q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w;
        a2 += r.x * r.x + r.y * r.y + r.z * r.z + r.w * r.w;
        a3 += s.x * s.x + s.y * s.y + s.z * s.z + s.w * s.w;
    }
    for (; i < n4; i += 32) {
        const float4 p = xr[i];
        a0 += p.x * p.x + p.y * p.y + p.z * p.z + p.w * p.w;
    }
    const float total = warp_sum((a0 + a1) + (a2 + a3));
    if (lane == 0) y[row] = total;
}

__global__ void __launch_bounds__(THREADS) sumsq_scalar(const float* __restrict__ x, float* __restrict__ y,
                                                        int64_t rows, int64_t cols) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= rows) return;
    const float* xr = x + row * cols;
    float acc = 0.f;
    for (int64_t i = lane; i < cols; i += 32) acc += xr[i] * xr[i];
    const float total = warp_sum(acc);
    if (lane == 0) y[row] = total;
}

torch::Tensor row_sum_squares(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "row_sum_squares: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "row_sum_squares: x must be float32");
    TORCH_CHECK(x.dim() == 2, "row_sum_squares: x must be 2-D");
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    auto y = torch::empty({rows}, xc.options());
    if (rows == 0) return y;
    if (cols == 0) return y.zero_();
    auto stream = at::cuda::getCurrentCUDAStream();
    const int64_t blocks = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    const float* xp = xc.data_ptr<float>();
    if (cols % 4 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0) {
        sumsq_vec4<<<(unsigned)blocks, THREADS, 0, stream>>>(xp, y.data_ptr<float>(), rows, cols);
    } else {
        sumsq_scalar<<<(unsigned)blocks, THREADS, 0, stream>>>(xp, y.data_ptr<float>(), rows, cols);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="cudal1_l1_13_sumsq_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["row_sum_squares"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.row_sum_squares(x)
