# cudal1: expect=correct faster
# Folds the inference-mode batch norm into the convolution: w' = w * g / sqrt(v + eps) per output
# channel and b' = (b - mean) * g / sqrt(v + eps) + beta, computed every call from the current
# parameters (a few hundred KB of work, nothing cached). Then one cuDNN convolution with the
# folded weights and an in-place ReLU: the batch-norm pass over the 268 MB output (read + write)
# disappears. fp32, TF32 off; folding changes rounding only (~1e-6 relative).
import torch
import torch.nn as nn
import torch.nn.functional as F


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
        y = F.conv2d(x, weight, bias, stride=self.conv.stride, padding=self.conv.padding)
        return y.relu_()
