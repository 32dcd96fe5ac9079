import torch
import torch.nn as nn

# Linear layer followed by the "quick GELU" activation y * sigmoid(1.702 * y), whose three eager
# kernels each make a pass over the (16384 x 4096) output.
# Estimate on an H100 (fp32, no TF32): GEMM 2*16384*1024*4096 = 137 GFLOP -> ~2.8 ms; epilogue
# ~1.9 GB at ~3 TB/s -> ~0.6 ms; total ~3.4 ms.

BATCH = 16384
IN_FEATURES = 1024
OUT_FEATURES = 4096


class Model(nn.Module):
    """y = linear(x); out = y * sigmoid(1.702 * y)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return y * torch.sigmoid(1.702 * y)


def get_inputs():
    x = torch.randn(BATCH, IN_FEATURES)
    return [x]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
