import torch
import torch.nn as nn

# A 2-D convolution whose kernel equals its stride (non-overlapping patches), as in the patch
# embedding of a vision transformer.
# Estimate on an H100 (fp32, no TF32): 2 * BATCH*(224/16)^2 * 768 * (3*16*16) = 118 GFLOP at
# ~50 TFLOP/s -> ~2.4 ms (cuDNN's fp32 path for this shape is usually slower than that).

BATCH = 512
IN_CHANNELS = 3
IMAGE = 224
PATCH = 16
EMBED = 768


class Model(nn.Module):
    """y = Conv2d(in_channels, embed, kernel_size=patch, stride=patch)(x)."""

    def __init__(self, in_channels: int, embed: int, patch: int):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, embed, kernel_size=patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def get_inputs():
    x = torch.randn(BATCH, IN_CHANNELS, IMAGE, IMAGE)
    return [x]


def get_init_inputs():
    return [IN_CHANNELS, EMBED, PATCH]
