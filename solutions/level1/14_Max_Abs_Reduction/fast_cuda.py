# cudal1: expect=correct faster
# Reduction over the middle dimension of (B, R, C) without materialising |x|. Each block covers
# 32 consecutive columns of one batch entry; its 8 warps split the R rows, each lane reading one
# column, so every warp load is one coalesced 128-byte segment. Partial maxima meet in shared
# memory. One read of x (~1.6 GB) instead of abs (read + write) and amax (read), ~3x less traffic.
# max is exact, so results are bit-identical; a NaN anywhere in a column gives NaN, as amax does.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor max_abs_dim1(torch::Tensor x);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <math.h>

constexpr int COLS_PER_BLOCK = 32;
constexpr int SPLIT = 8;

__global__ void __launch_bounds__(COLS_PER_BLOCK * SPLIT) max_abs_mid(const float* __restrict__ x, float* __restrict__ y,
                                                                      int64_t reduce, int64_t cols) {
    __shared__ float part[SPLIT][COLS_PER_BLOCK];
    __shared__ int part_nan[SPLIT][COLS_PER_BLOCK];
    const int64_t b = blockIdx.y;
    const int64_t col = (int64_t)blockIdx.x * COLS_PER_BLOCK + threadIdx.x;
    float m0 = 0.0f, m1 = 0.0f;  // |x| >= 0, so 0 is a safe start (reduce >= 1 is checked on the host)
    bool nan = false;
    if (col < cols) {
        const float* base = x + b * reduce * cols + col;
        int64_t r = threadIdx.y;
        for (; r + SPLIT < reduce; r += 2 * SPLIT) {
            const float p = fabsf(base[r * cols]);
            const float q = fabsf(base[(r + SPLIT) * cols]);
            nan |= isnan(p) | isnan(q);
            m0 = fmaxf(m0, p);
            m1 = fmaxf(m1, q);
        }
        for (; r < reduce; r += SPLIT) {
            const float p = fabsf(base[r * cols]);
            nan |= isnan(p);
            m0 = fmaxf(m0, p);
        }
    }
    part[threadIdx.y][threadIdx.x] = fmaxf(m0, m1);
    part_nan[threadIdx.y][threadIdx.x] = nan ? 1 : 0;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        float m = part[0][threadIdx.x];
        int any_nan = part_nan[0][threadIdx.x];
#pragma unroll
        for (int s = 1; s < SPLIT; ++s) {
            m = fmaxf(m, part[s][threadIdx.x]);
            any_nan |= part_nan[s][threadIdx.x];
        }
        y[b * cols + col] = any_nan ? NAN : m;
    }
}

torch::Tensor max_abs_dim1(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "max_abs_dim1: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "max_abs_dim1: x must be float32");
    TORCH_CHECK(x.dim() == 3, "max_abs_dim1: x must be 3-D");
    TORCH_CHECK(x.size(1) > 0, "max_abs_dim1: cannot reduce over an empty dimension");
    auto xc = x.contiguous();
    const int64_t batch = xc.size(0), reduce = xc.size(1), cols = xc.size(2);
    auto y = torch::empty({batch, cols}, xc.options());
    if (batch == 0 || cols == 0) return y;
    TORCH_CHECK(batch <= 65535, "max_abs_dim1: batch too large for gridDim.y");
    const dim3 block(COLS_PER_BLOCK, SPLIT);
    const dim3 grid((unsigned)((cols + COLS_PER_BLOCK - 1) / COLS_PER_BLOCK), (unsigned)batch);
    max_abs_mid<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), reduce, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="cudal1_l1_14_maxabs_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["max_abs_dim1"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.max_abs_dim1(x)
