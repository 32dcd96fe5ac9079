# cudal1: expect=correct faster
# A convolution whose kernel equals its stride is a matrix product over non-overlapping patches.
# One reshape/permute copy (308 MB read and written) lays the patches out as rows of
# (C*P*P) values in the weight's (c, kh, kw) order; then a single cuBLAS addmm with the bias
# (M = BATCH*196, K = N = 768) replaces cuDNN's strided-convolution path. The result is returned
# as an (N, E, H', W') view of the (N, H', W', E) product (channels-last strides, no extra copy).
# fp32, no TF32; only the summation order differs from cuDNN.
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
        x = x[:, :, : gh * p, : gw * p]
        patches = (
            x.reshape(n, c, gh, p, gw, p)
            .permute(0, 2, 4, 1, 3, 5)
            .reshape(n * gh * gw, c * p * p)
        )
        weight = self.proj.weight.reshape(self.proj.out_channels, c * p * p)
        out = torch.addmm(self.proj.bias, patches, weight.t())
        return out.view(n, gh, gw, -1).permute(0, 3, 1, 2)
