# cudal1: expect=correct faster
# diag(a) @ B scales row i of B by a[i]. One CUDA kernel does exactly that: a grid-stride loop over
# 16-byte float4 chunks of B (scalar fallback when the row length is not a multiple of 4 or the
# pointers are unaligned), each thread reading a[row] once per chunk. One read and one write of B
# (~134 MB, ~0.05 ms at 3 TB/s) instead of a 64 MB diagonal matrix and a 137 GFLOP dense product.
# Every output is the single rounded product a[i]*B[i, j], bit-identical to the dense product.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor diag_scale_rows(torch::Tensor a, torch::Tensor b);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__global__ void scale_rows_vec4(const float* __restrict__ a, const float4* __restrict__ b,
                                float4* __restrict__ out, int64_t rows, int64_t cols4) {
    const int64_t total = rows * cols4;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const float s = __ldg(a + i / cols4);
        float4 v = b[i];
        v.x *= s; v.y *= s; v.z *= s; v.w *= s;
        out[i] = v;
    }
}

__global__ void scale_rows_scalar(const float* __restrict__ a, const float* __restrict__ b,
                                  float* __restrict__ out, int64_t rows, int64_t cols) {
    const int64_t total = rows * cols;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        out[i] = __ldg(a + i / cols) * b[i];
    }
}

torch::Tensor diag_scale_rows(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "diag_scale_rows: inputs must be CUDA tensors");
    TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
                "diag_scale_rows: inputs must be float32");
    TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && a.size(0) == b.size(0),
                "diag_scale_rows: expected a (N,) and B (N, M)");
    auto ac = a.contiguous();
    auto bc = b.contiguous();
    auto out = torch::empty_like(bc);
    const int64_t rows = bc.size(0), cols = bc.size(1);
    if (rows == 0 || cols == 0) return out;
    const int threads = 256;
    const int64_t max_blocks = (int64_t)at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 16;
    auto stream = at::cuda::getCurrentCUDAStream();
    const bool aligned = (reinterpret_cast<uintptr_t>(bc.data_ptr<float>()) % 16 == 0) &&
                         (reinterpret_cast<uintptr_t>(out.data_ptr<float>()) % 16 == 0);
    if (cols % 4 == 0 && aligned) {
        const int64_t cols4 = cols / 4;
        const int64_t blocks = std::min<int64_t>((rows * cols4 + threads - 1) / threads, max_blocks);
        scale_rows_vec4<<<(unsigned)blocks, threads, 0, stream>>>(
            ac.data_ptr<float>(), reinterpret_cast<const float4*>(bc.data_ptr<float>()),
            reinterpret_cast<float4*>(out.data_ptr<float>()), rows, cols4);
    } else {
        const int64_t blocks = std::min<int64_t>((rows * cols + threads - 1) / threads, max_blocks);
        scale_rows_scalar<<<(unsigned)blocks, threads, 0, stream>>>(
            ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="cudal1_l1_5_diag_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["diag_scale_rows"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return _ext.diag_scale_rows(a, B)
