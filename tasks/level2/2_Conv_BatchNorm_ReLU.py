import torch
import torch.nn as nn

# 3x3 convolution, batch normalisation (inference: running statistics) and ReLU.
# The batch-norm parameters and running statistics are set to random values so that the
# normalisation is far from the identity.
# Estimate on an H100 (fp32, no TF32): conv 2*32*128*128*128*64*9 = 77 GFLOP -> ~1.5-2.5 ms;
# batch norm and ReLU each read and write the 268 MB output: ~1.1 GB -> ~0.4 ms.

BATCH = 32
IN_CHANNELS = 64
OUT_CHANNELS = 128
SIZE = 128


class Model(nn.Module):
    """y = relu(batchnorm(conv3x3(x)))."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bn = nn.BatchNorm2d(out_channels)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)
            self.bn.running_mean.uniform_(-0.2, 0.2)
            self.bn.running_var.uniform_(0.25, 1.0)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x)))


def get_inputs():
    x = torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)
    return [x]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
