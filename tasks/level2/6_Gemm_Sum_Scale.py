import torch
import torch.nn as nn

# Linear layer whose outputs are summed over the feature dimension and scaled.
# Estimate on an H100 (fp32, no TF32): GEMM 2*8192*4096*4096 = 275 GFLOP at ~50 TFLOP/s
# -> ~5.5 ms; the sum is negligible.

BATCH = 8192
IN_FEATURES = 4096
OUT_FEATURES = 4096
SCALE = 0.5


class Model(nn.Module):
    """out = sum_j linear(x)[:, j] * scale, shape (BATCH, 1)."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return torch.sum(y, dim=1, keepdim=True) * self.scale


def get_inputs():
    x = torch.randn(BATCH, IN_FEATURES)
    return [x]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, SCALE]
