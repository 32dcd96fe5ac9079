# cudal1: expect=correct faster
# Trial (diagnostic): the reference's own convolutions and batch norms, with the ReLUs and the
# residual add done in place. If this is as slow as the folded variants, the convolution with
# folded weights is not what costs time.
import torch
import torch.nn as nn
import torch.nn.functional as F


def _randomise(bn: nn.BatchNorm2d) -> None:
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.3, 0.3)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 1.5)


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        _randomise(self.bn1)
        _randomise(self.bn2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn1(self.conv1(x)).relu_()
        out = self.bn2(self.conv2(out))
        return out.add_(x).relu_()
