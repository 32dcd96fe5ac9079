# cudal1: expect=correct faster
# Folds the per-channel scale into the convolution weights and bias (w' = w * scale[c],
# b' = b * scale[c] + shift[c], a few KB of work per call from the current parameters), so the
# convolution directly produces y * scale + shift and only an in-place sigmoid remains: one
# read and write of the 268 MB output instead of three. fp32, TF32 off; folding changes rounding
# only.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(out_channels, 1, 1))
        self.shift = nn.Parameter(0.5 * torch.randn(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.scale.view(-1)
        weight = self.conv.weight * s.view(-1, 1, 1, 1)
        bias = self.conv.bias * s + self.shift.view(-1)
        y = F.conv2d(x, weight, bias, stride=self.conv.stride, padding=self.conv.padding)
        return y.sigmoid_()
