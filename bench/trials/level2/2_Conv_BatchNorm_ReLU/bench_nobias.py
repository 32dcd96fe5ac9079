# cudal1: expect=correct faster
# Trial: autotuned cuDNN convolution without the bias argument; shift and ReLU in one in-place pass
# each.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True


class ModelNew(nn.Module):
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
        bn = self.bn
        scale = bn.weight * torch.rsqrt(bn.running_var + bn.eps)
        weight = self.conv.weight * scale.view(-1, 1, 1, 1)
        bias = (self.conv.bias - bn.running_mean) * scale + bn.bias
        y = F.conv2d(x, weight, stride=self.conv.stride, padding=self.conv.padding)
        return y.add_(bias.view(1, -1, 1, 1)).relu_()
