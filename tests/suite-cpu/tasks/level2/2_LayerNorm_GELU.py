import torch
import torch.nn as nn
import torch.nn.functional as F

# CPU-suite task: layer norm with random affine parameters, then exact (erf) GELU (small sizes).

ROWS = 64
HIDDEN = 128


class Model(nn.Module):
    """y = gelu(layer_norm(x))."""

    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.3)
            self.norm.bias.normal_(0.0, 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.norm(x))


def get_inputs():
    return [torch.randn(ROWS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]
