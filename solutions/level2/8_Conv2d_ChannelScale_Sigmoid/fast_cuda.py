# cudal1: expect=correct faster
# The convolution stays in cuDNN (fp32, TF32 off). The eager epilogue (per-channel scale, shift,
# sigmoid: three kernels, ~1.6 GB over the 268 MB output) becomes one in-place CUDA kernel that
# computes sigmoid(y * scale[c] + shift[c]) with the channel taken from the NCHW index, float4
# accesses when H*W is a multiple of 4 (so a float4 never straddles two channels). ~0.54 GB of
# traffic. Same fp32 operations; FMA contraction may change the last bit.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor scale_shift_sigmoid_(torch::Tensor y, torch::Tensor scale, torch::Tensor shift);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float sss(float v, float a, float b) { return 1.0f / (1.0f + expf(-(v * a + b))); }

__global__ void sss_vec4(float4* __restrict__ y, const float* __restrict__ scale, const float* __restrict__ shift,
                         int64_t n4, int64_t hw4, int64_t channels) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        const int64_t c = (i / hw4) % channels;
        const float a = __ldg(scale + c), b = __ldg(shift + c);
        float4 v = y[i];
        v.x = sss(v.x, a, b); v.y = sss(v.y, a, b); v.z = sss(v.z, a, b); v.w = sss(v.w, a, b);
        y[i] = v;
    }
}

__global__ void sss_scalar(float* __restrict__ y, const float* __restrict__ scale, const float* __restrict__ shift,
                           int64_t n, int64_t hw, int64_t channels) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t c = (i / hw) % channels;
        y[i] = sss(y[i], __ldg(scale + c), __ldg(shift + c));
    }
}

// In place on a contiguous NCHW float32 tensor that nobody else holds.
torch::Tensor scale_shift_sigmoid_(torch::Tensor y, torch::Tensor scale, torch::Tensor shift) {
    TORCH_CHECK(y.is_cuda() && scale.is_cuda() && shift.is_cuda(), "scale_shift_sigmoid_: CUDA tensors expected");
    TORCH_CHECK(y.scalar_type() == at::kFloat && scale.scalar_type() == at::kFloat && shift.scalar_type() == at::kFloat,
                "scale_shift_sigmoid_: float32 expected");
    TORCH_CHECK(y.dim() == 4 && y.is_contiguous(), "scale_shift_sigmoid_: contiguous NCHW tensor expected");
    const int64_t channels = y.size(1), hw = y.size(2) * y.size(3), n = y.numel();
    TORCH_CHECK(scale.numel() == channels && shift.numel() == channels, "scale_shift_sigmoid_: one scale and shift per channel");
    auto sc = scale.contiguous();
    auto sh = shift.contiguous();
    if (n == 0) return y;
    const int threads = 256;
    const int64_t max_blocks = (int64_t)at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 16;
    auto stream = at::cuda::getCurrentCUDAStream();
    float* yp = y.data_ptr<float>();
    if (hw % 4 == 0 && reinterpret_cast<uintptr_t>(yp) % 16 == 0) {
        const int64_t n4 = n / 4;
        const int64_t blocks = std::min<int64_t>((n4 + threads - 1) / threads, max_blocks);
        sss_vec4<<<(unsigned)blocks, threads, 0, stream>>>(reinterpret_cast<float4*>(yp), sc.data_ptr<float>(),
                                                           sh.data_ptr<float>(), n4, hw / 4, channels);
    } else {
        const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, max_blocks);
        sss_scalar<<<(unsigned)blocks, threads, 0, stream>>>(yp, sc.data_ptr<float>(), sh.data_ptr<float>(), n, hw, channels);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="cudal1_l2_8_scale_sigmoid_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["scale_shift_sigmoid_"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(out_channels, 1, 1))
        self.shift = nn.Parameter(0.5 * torch.randn(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x).contiguous()
        return _ext.scale_shift_sigmoid_(y, self.scale, self.shift)
