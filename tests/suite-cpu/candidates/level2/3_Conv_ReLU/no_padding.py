# cudal1: expect=incorrect
# Wrong shape: forgets the padding, so the output is 2 pixels smaller in each spatial dimension.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(F.conv2d(x, self.conv.weight, self.conv.bias))
