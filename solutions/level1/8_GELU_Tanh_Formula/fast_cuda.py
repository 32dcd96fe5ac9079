# cudal1: expect=correct faster
# The eager formula launches eight elementwise kernels (pow, two scalings, add, tanh, add, two
# products), each a full pass over 537 MB: ~9.7 GB of traffic. This kernel evaluates the same
# expression per element in registers, 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))), reading
# x once and writing y once with float4 accesses (~1.1 GB, ~9x less). Accurate tanhf, no
# fast-math; differences from the reference are rounding-level (FMA contraction).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor gelu_tanh_forward(torch::Tensor x);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float gelu_tanh(float v) {
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float inner = k0 * (v + 0.044715f * (v * v * v));
    return 0.5f * v * (1.0f + tanhf(inner));
}

__global__ void gelu_vec4(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = x[i];
        v.x = gelu_tanh(v.x); v.y = gelu_tanh(v.y); v.z = gelu_tanh(v.z); v.w = gelu_tanh(v.w);
        y[i] = v;
    }
}

__global__ void gelu_scalar(const float* __restrict__ x, float* __restrict__ y, int64_t start, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = gelu_tanh(x[i]);
    }
}

torch::Tensor gelu_tanh_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "gelu_tanh_forward: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "gelu_tanh_forward: x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return y;
    const int threads = 256;
    const int64_t max_blocks = (int64_t)at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 16;
    auto stream = at::cuda::getCurrentCUDAStream();
    const float* xp = xc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool aligned = reinterpret_cast<uintptr_t>(xp) % 16 == 0 && reinterpret_cast<uintptr_t>(yp) % 16 == 0;
    int64_t done = 0;
    if (aligned && n >= 4) {
        const int64_t n4 = n / 4;
        const int64_t blocks = std::min<int64_t>((n4 + threads - 1) / threads, max_blocks);
        gelu_vec4<<<(unsigned)blocks, threads, 0, stream>>>(
            reinterpret_cast<const float4*>(xp), reinterpret_cast<float4*>(yp), n4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        done = n4 * 4;
    }
    if (done < n) {
        const int64_t rest = n - done;
        const int64_t blocks = std::min<int64_t>((rest + threads - 1) / threads, max_blocks);
        gelu_scalar<<<(unsigned)blocks, threads, 0, stream>>>(xp, yp, done, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

_ext = load_inline(
    name="cudal1_l1_8_gelu_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["gelu_tanh_forward"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.gelu_tanh_forward(x)
