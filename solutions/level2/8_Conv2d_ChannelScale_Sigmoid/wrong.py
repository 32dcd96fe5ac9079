# cudal1: expect=incorrect
# Bug: applies the shift before the scale, computing sigmoid((y + shift) * scale).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(out_channels, 1, 1))
        self.shift = nn.Parameter(0.5 * torch.randn(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid((self.conv(x) + self.shift) * self.scale)
