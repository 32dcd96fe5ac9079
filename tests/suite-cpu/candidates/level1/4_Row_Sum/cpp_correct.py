# cudal1: expect=correct
# A C++ extension built with load_inline (cpp_sources only, no CUDA, so it builds where there is
# no nvcc): one loop per row, accumulated in double and rounded to float32 once. Built lazily on
# the first call, into a build directory of its own, as many published kernels do: the compile
# pool must build it ahead, and the candidate's own build must find that build.
import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#include <torch/extension.h>

torch::Tensor row_sum(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu(), "row_sum: x must be a CPU tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "row_sum: x must be float32");
    TORCH_CHECK(x.dim() == 2, "row_sum: x must be 2-D");
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    auto out = torch::empty({rows}, xc.options());
    const float* p = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < rows; ++i) {
        double acc = 0.0;
        for (int64_t j = 0; j < cols; ++j) acc += p[i * cols + j];
        o[i] = static_cast<float>(acc);
    }
    return out;
}
"""

_BUILD_DIR = "cpp_extensions_build"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._ext = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._ext is None:
            os.makedirs(_BUILD_DIR, exist_ok=True)
            self._ext = load_inline(
                name="cudal1_cpu_row_sum_cpp",
                cpp_sources=_CPP,
                functions=["row_sum"],
                extra_cflags=["-O2"],
                build_directory=_BUILD_DIR,
                verbose=False,
            )
        return self._ext.row_sum(x)
