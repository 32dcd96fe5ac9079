# cudal1: expect=correct
# Softmax written as exp(x - max) / sum: the same function, computed with separate kernels
# (slower than the fused reference kernel; a correct candidate for measuring noise).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        e = torch.exp(x - x.amax(dim=1, keepdim=True))
        return e / e.sum(dim=1, keepdim=True)
