import torch
import torch.nn as nn
import torch.nn.functional as F

# Layer norm, exact (erf) GELU and a residual add: three eager kernels.
# The layer-norm affine parameters are random so that they matter.
# Estimate on an H100: 134M floats (0.54 GB); ~7 tensor-sized reads and writes = ~3.8 GB at
# ~3 TB/s -> ~1.3 ms.

ROWS = 32768
HIDDEN = 4096


class Model(nn.Module):
    """out = x + gelu(layer_norm(x))."""

    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.3)
            self.norm.bias.normal_(0.0, 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.norm(x))


def get_inputs():
    x = torch.randn(ROWS, HIDDEN)
    return [x]


def get_init_inputs():
    return [HIDDEN]
