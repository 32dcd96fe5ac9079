# cudal1: expect=correct faster
# The GEMM stays in cuBLAS (torch.addmm with the bias, fp32, TF32 off); the three eager epilogue
# kernels (scale, sigmoid, product, ~1.9 GB over the 268 MB output) become one in-place CUDA
# kernel, y = y / (1 + exp(-1.702 * y)), a single read and write with float4 accesses (~0.54 GB).
# Saves ~0.45 ms of ~3.4 ms. Accurate expf; rounding-level differences only.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor quick_gelu_(torch::Tensor y);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float qgelu(float v) { return v / (1.0f + expf(-(1.702f * v))); }

__global__ void qgelu_vec4(float4* __restrict__ y, int64_t n4) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = y[i];
        v.x = qgelu(v.x); v.y = qgelu(v.y); v.z = qgelu(v.z); v.w = qgelu(v.w);
        y[i] = v;
    }
}

__global__ void qgelu_scalar(float* __restrict__ y, int64_t start, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = qgelu(y[i]);
}

// In place: y must be a contiguous float32 CUDA tensor that nobody else holds.
torch::Tensor quick_gelu_(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == at::kFloat, "quick_gelu_: y must be a float32 CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "quick_gelu_: y must be contiguous");
    const int64_t n = y.numel();
    if (n == 0) return y;
    const int threads = 256;
    const int64_t max_blocks = (int64_t)at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 16;
    auto stream = at::cuda::getCurrentCUDAStream();
    float* yp = y.data_ptr<float>();
    int64_t done = 0;
    if (reinterpret_cast<uintptr_t>(yp) % 16 == 0 && n >= 4) {
        const int64_t n4 = n / 4;
        const int64_t blocks = std::min<int64_t>((n4 + threads - 1) / threads, max_blocks);
        qgelu_vec4<<<(unsigned)blocks, threads, 0, stream>>>(reinterpret_cast<float4*>(yp), n4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        done = n4 * 4;
    }
    if (done < n) {
        const int64_t blocks = std::min<int64_t>((n - done + threads - 1) / threads, max_blocks);
        qgelu_scalar<<<(unsigned)blocks, threads, 0, stream>>>(yp, done, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

_ext = load_inline(
    name="cudal1_l2_1_qgelu_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["quick_gelu_"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        return _ext.quick_gelu_(y)
