# cudal1: expect=compile_error
# A C++ extension (cpp_sources only) with a syntax error: a missing semicolon after a
# declaration. load_inline's build fails when the module is imported.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#include <torch/extension.h>

torch::Tensor row_sum(torch::Tensor x) {
    auto xc = x.contiguous()
    return xc.sum(1);
}
"""

_ext = load_inline(
    name="cudal1_cpu_row_sum_broken",
    cpp_sources=_CPP,
    functions=["row_sum"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.row_sum(x)
