import torch
import torch.nn as nn

# A ResNet basic block (two 3x3 convolutions with batch norm, identity shortcut), inference mode.
# Batch-norm parameters and running statistics are random so that they matter.
# Estimate on an H100 (fp32, no TF32): 2 convs * 2*32*56*56*128*128*9 = 59 GFLOP -> ~1.2-2 ms;
# batch norms, ReLUs and the add make ~0.6 GB of traffic -> ~0.2 ms.

BATCH = 32
CHANNELS = 128
SIZE = 56


def _randomise(bn: nn.BatchNorm2d) -> None:
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.3, 0.3)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 1.5)


class Model(nn.Module):
    """out = relu(bn2(conv2(relu(bn1(conv1(x))))) + x)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        _randomise(self.bn1)
        _randomise(self.bn2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


def get_inputs():
    x = torch.randn(BATCH, CHANNELS, SIZE, SIZE)
    return [x]


def get_init_inputs():
    return [CHANNELS]
