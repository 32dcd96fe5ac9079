# cudal1: expect=incorrect
# Bug: the patch-matmul rewrite forgets the convolution's bias (mm instead of addmm), so every
# output channel is off by its bias value.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, embed: int, patch: int):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, embed, kernel_size=patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        p = self.proj.kernel_size[0]
        gh, gw = h // p, w // p
        patches = (
            x.reshape(n, c, gh, p, gw, p)
            .permute(0, 2, 4, 1, 3, 5)
            .reshape(n * gh * gw, c * p * p)
        )
        weight = self.proj.weight.reshape(self.proj.out_channels, c * p * p)
        out = torch.mm(patches, weight.t())
        return out.view(n, gh, gw, -1).permute(0, 3, 1, 2)
