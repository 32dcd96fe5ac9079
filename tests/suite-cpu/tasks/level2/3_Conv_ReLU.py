import torch
import torch.nn as nn

# CPU-suite task: a 3x3 convolution followed by ReLU (small sizes).

BATCH = 4
IN_CHANNELS = 3
OUT_CHANNELS = 8
SIZE = 16


class Model(nn.Module):
    """y = relu(conv3x3(x)), padding 1."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
