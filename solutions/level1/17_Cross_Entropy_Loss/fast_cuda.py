# cudal1: expect=correct faster
# Fused cross-entropy: one 256-thread block per row reads the logits once (float4 when aligned),
# keeping an online (max, sum of exp) pair per thread that is rescaled when a larger value
# arrives; the pairs merge across the block with warp shuffles and shared memory, and thread 0
# writes logsumexp - logit[target] (0 for target -100, which F.cross_entropy ignores). One read of
# the 1.07 GB logits instead of log_softmax's reads and its 1.07 GB output, ~3x less traffic.
# Accurate expf/logf; rounding-level differences only.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "std::vector<torch::Tensor> ce_rows(torch::Tensor logits, torch::Tensor targets, int64_t ignore_index);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <math.h>
#include <vector>

constexpr int THREADS = 256;

struct MaxSum { float m; float s; };

// exp(a - b) that treats an empty partial (-inf) as contributing nothing.
__device__ __forceinline__ float rescale(float a, float b) { return a == -INFINITY ? 0.0f : expf(a - b); }

__device__ __forceinline__ MaxSum merge(MaxSum p, MaxSum q) {
    const float m = fmaxf(p.m, q.m);
    if (m == -INFINITY) return {m, 0.0f};
    return {m, p.s * rescale(p.m, m) + q.s * rescale(q.m, m)};
}

__device__ __forceinline__ void push(MaxSum& a, float v) {
    if (v > a.m) {
        a.s = a.s * rescale(a.m, v) + 1.0f;
        a.m = v;
    } else {
        a.s += expf(v - a.m);
    }
}

__global__ void __launch_bounds__(THREADS) ce_kernel(const float* __restrict__ logits, const int64_t* __restrict__ targets,
                                                     float* __restrict__ loss, float* __restrict__ counted,
                                                     int64_t classes, bool vec, int64_t ignore_index) {
    __shared__ float red_m[THREADS / 32];
    __shared__ float red_s[THREADS / 32];
    const int64_t row = blockIdx.x;
    const float* xr = logits + row * classes;
    MaxSum a = {-INFINITY, 0.0f};
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const int64_t n4 = classes / 4;
        for (int64_t i = threadIdx.x; i < n4; i += THREADS) {
            const float4 q = x4[i];
            push(a, q.x); push(a, q.y); push(a, q.z); push(a, q.w);
        }
    } else {
        for (int64_t i = threadIdx.x; i < classes; i += THREADS) push(a, xr[i]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        MaxSum b = {__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o)};
        a = merge(a, b);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { red_m[warp] = a.m; red_s[warp] = a.s; }
    __syncthreads();
    if (threadIdx.x == 0) {
        MaxSum t = {red_m[0], red_s[0]};
        for (int w = 1; w < THREADS / 32; ++w) t = merge(t, MaxSum{red_m[w], red_s[w]});
        const int64_t target = targets[row];
        if (target == ignore_index) {
            loss[row] = 0.0f;
            counted[row] = 0.0f;
        } else if (target < 0 || target >= classes) {
            loss[row] = NAN;  // out-of-range target: poison the result instead of reading out of bounds
            counted[row] = 1.0f;
        } else {
            loss[row] = (logf(t.s) + t.m) - xr[target];
            counted[row] = 1.0f;
        }
    }
}

std::vector<torch::Tensor> ce_rows(torch::Tensor logits, torch::Tensor targets, int64_t ignore_index) {
    TORCH_CHECK(logits.is_cuda() && targets.is_cuda(), "ce_rows: inputs must be CUDA tensors");
    TORCH_CHECK(logits.scalar_type() == at::kFloat, "ce_rows: logits must be float32");
    TORCH_CHECK(targets.scalar_type() == at::kLong, "ce_rows: targets must be int64");
    TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
                "ce_rows: expected logits (N, C) and targets (N,)");
    auto lc = logits.contiguous();
    auto tc = targets.contiguous();
    const int64_t rows = lc.size(0), classes = lc.size(1);
    auto loss = torch::empty({rows}, lc.options());
    auto counted = torch::empty({rows}, lc.options());
    if (rows == 0) return {loss, counted};
    TORCH_CHECK(classes > 0, "ce_rows: no classes");
    TORCH_CHECK(rows <= 0x7fffffff, "ce_rows: too many rows");
    const float* lp = lc.data_ptr<float>();
    const bool vec = classes % 4 == 0 && reinterpret_cast<uintptr_t>(lp) % 16 == 0;
    ce_kernel<<<(unsigned)rows, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        lp, tc.data_ptr<int64_t>(), loss.data_ptr<float>(), counted.data_ptr<float>(), classes, vec, ignore_index);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {loss, counted};
}
"""

_ext = load_inline(
    name="cudal1_l1_17_ce_fast_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["ce_rows"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss, _counted = _ext.ce_rows(logits, targets, -100)
        return loss
