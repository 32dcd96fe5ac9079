# cudal1: expect=correct faster
# One elementwise kernel for torch.where(x > 0, x, x * slope): a select per element in registers,
# float4 loads and stores, instead of a comparison kernel (bool mask), a product kernel and a
# select kernel with two temporaries. ~1.6 GB of traffic instead of ~5.2 GB. The negative branch
# is the same single fp32 product, so the results are bit-identical.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor leaky_forward(torch::Tensor x, double slope);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float leaky(float v, float s) { return v > 0.0f ? v : v * s; }

__global__ void leaky_vec4(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4, float s) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = x[i];
        v.x = leaky(v.x, s); v.y = leaky(v.y, s); v.z = leaky(v.z, s); v.w = leaky(v.w, s);
        y[i] = v;
    }
}

__global__ void leaky_scalar(const float* __restrict__ x, float* __restrict__ y, int64_t start, int64_t n, float s) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = leaky(x[i], s);
    }
}

torch::Tensor leaky_forward(torch::Tensor x, double slope) {
    TORCH_CHECK(x.is_cuda(), "leaky_forward: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "leaky_forward: x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return y;
    const float s = static_cast<float>(slope);
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
        leaky_vec4<<<(unsigned)blocks, threads, 0, stream>>>(
            reinterpret_cast<const float4*>(xp), reinterpret_cast<float4*>(yp), n4, s);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        done = n4 * 4;
    }
    if (done < n) {
        const int64_t rest = n - done;
        const int64_t blocks = std::min<int64_t>((rest + threads - 1) / threads, max_blocks);
        leaky_scalar<<<(unsigned)blocks, threads, 0, stream>>>(xp, yp, done, n, s);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

_ext = load_inline(
    name="cudal1_l1_10_leaky_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["leaky_forward"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.leaky_forward(x, float(self.negative_slope))
