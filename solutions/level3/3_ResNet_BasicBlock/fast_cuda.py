# cudal1: expect=correct faster
# The two convolutions stay in cuDNN with their own weights (fp32, TF32 off). Each inference-mode
# batch norm and what follows it becomes one in-place CUDA kernel over the 51 MB activation:
# relu(y * s[c] + t[c]) after the first convolution, relu(y * s[c] + t[c] + x) after the second.
# Eager PyTorch makes five passes (batch norm, ReLU, batch norm, add, ReLU: ~0.56 GB of traffic);
# this makes two (~0.26 GB). s = g / sqrt(v + eps) and t = beta - mean * s are kept between calls
# and recomputed whenever a batch-norm tensor changes (PyTorch's version counters): computed
# every call, their six tiny kernels cost as much host time as the fusion saved (measured on an
# H100, docs/bench/2026-11-21-gpu-session3). float4 accesses; the same fp32 operations up to FMA
# contraction.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor affine_relu_(torch::Tensor y, torch::Tensor scale, torch::Tensor shift, torch::Tensor residual);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

template <bool RESIDUAL>
__global__ void affine_relu_vec4(float4* __restrict__ y, const float4* __restrict__ r, const float* __restrict__ scale,
                                 const float* __restrict__ shift, int64_t n4, int64_t hw4, int64_t channels) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        const int64_t c = (i / hw4) % channels;
        const float a = __ldg(scale + c), b = __ldg(shift + c);
        float4 v = y[i];
        v.x = v.x * a + b; v.y = v.y * a + b; v.z = v.z * a + b; v.w = v.w * a + b;
        if (RESIDUAL) {
            const float4 s = r[i];
            v.x += s.x; v.y += s.y; v.z += s.z; v.w += s.w;
        }
        v.x = fmaxf(v.x, 0.0f); v.y = fmaxf(v.y, 0.0f); v.z = fmaxf(v.z, 0.0f); v.w = fmaxf(v.w, 0.0f);
        y[i] = v;
    }
}

template <bool RESIDUAL>
__global__ void affine_relu_scalar(float* __restrict__ y, const float* __restrict__ r, const float* __restrict__ scale,
                                   const float* __restrict__ shift, int64_t n, int64_t hw, int64_t channels) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t c = (i / hw) % channels;
        float v = y[i] * __ldg(scale + c) + __ldg(shift + c);
        if (RESIDUAL) v += r[i];
        y[i] = fmaxf(v, 0.0f);
    }
}

// y = relu(y * scale[c] + shift[c] (+ residual)) in place on contiguous NCHW float32 tensors.
// An empty `residual` means none.
torch::Tensor affine_relu_(torch::Tensor y, torch::Tensor scale, torch::Tensor shift, torch::Tensor residual) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == at::kFloat && y.dim() == 4 && y.is_contiguous(),
                "affine_relu_: contiguous NCHW float32 CUDA tensor expected");
    const bool has_residual = residual.numel() > 0;
    TORCH_CHECK(!has_residual || (residual.sizes() == y.sizes() && residual.scalar_type() == at::kFloat && residual.is_cuda()),
                "affine_relu_: residual must match y");
    const int64_t channels = y.size(1), hw = y.size(2) * y.size(3), n = y.numel();
    TORCH_CHECK(scale.numel() == channels && shift.numel() == channels, "affine_relu_: one scale and shift per channel");
    auto sc = scale.contiguous().to(at::kFloat);
    auto sh = shift.contiguous().to(at::kFloat);
    auto res = has_residual ? residual.contiguous() : residual;
    if (n == 0) return y;
    const int threads = 256;
    const int64_t max_blocks = (int64_t)at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 16;
    auto stream = at::cuda::getCurrentCUDAStream();
    float* yp = y.data_ptr<float>();
    const float* rp = has_residual ? res.data_ptr<float>() : nullptr;
    const bool vec = hw % 4 == 0 && reinterpret_cast<uintptr_t>(yp) % 16 == 0 && reinterpret_cast<uintptr_t>(rp) % 16 == 0;
    if (vec) {
        const int64_t n4 = n / 4;
        const unsigned blocks = (unsigned)std::min<int64_t>((n4 + threads - 1) / threads, max_blocks);
        auto y4 = reinterpret_cast<float4*>(yp);
        auto r4 = reinterpret_cast<const float4*>(rp);
        if (has_residual) affine_relu_vec4<true><<<blocks, threads, 0, stream>>>(y4, r4, sc.data_ptr<float>(), sh.data_ptr<float>(), n4, hw / 4, channels);
        else affine_relu_vec4<false><<<blocks, threads, 0, stream>>>(y4, r4, sc.data_ptr<float>(), sh.data_ptr<float>(), n4, hw / 4, channels);
    } else {
        const unsigned blocks = (unsigned)std::min<int64_t>((n + threads - 1) / threads, max_blocks);
        if (has_residual) affine_relu_scalar<true><<<blocks, threads, 0, stream>>>(yp, rp, sc.data_ptr<float>(), sh.data_ptr<float>(), n, hw, channels);
        else affine_relu_scalar<false><<<blocks, threads, 0, stream>>>(yp, rp, sc.data_ptr<float>(), sh.data_ptr<float>(), n, hw, channels);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="cudal1_l3_3_resnet_affine_relu",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["affine_relu_"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


def _randomise(bn: nn.BatchNorm2d) -> None:
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.3, 0.3)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 1.5)


def _affine(bn: nn.BatchNorm2d):
    scale = bn.weight * torch.rsqrt(bn.running_var + bn.eps)
    return scale, bn.bias - bn.running_mean * scale


class _AffineCache:
    """A batch norm's (scale, shift), recomputed when any of its tensors is replaced or edited."""

    def __init__(self) -> None:
        self._key = None
        self._value = None

    def get(self, bn: nn.BatchNorm2d):
        tensors = (bn.weight, bn.bias, bn.running_mean, bn.running_var)
        key = tuple((t.data_ptr(), t._version) for t in tensors) + (bn.eps,)
        if key != self._key:
            self._value = _affine(bn)
            self._key = key
        return self._value


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        _randomise(self.bn1)
        _randomise(self.bn2)
        self._affine1 = _AffineCache()
        self._affine2 = _AffineCache()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s1, t1 = self._affine1.get(self.bn1)
        s2, t2 = self._affine2.get(self.bn2)
        none = x.new_empty(0)
        out = _ext.affine_relu_(self.conv1(x).contiguous(), s1, t1, none)
        return _ext.affine_relu_(self.conv2(out).contiguous(), s2, t2, x.contiguous())
