# cudal1: expect=correct
# torch.mm instead of the @ operator: the same cuBLAS kernel, so the true speedup is 1.0.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.mm(a, b)
