# cudal1: degenerate=null_echo
# Degenerate under cudal1's convention of evaluating models in eval() mode: a freshly built
# BatchNorm normalises with its initial running statistics (mean 0, variance 1) and its initial
# affine (1, 0), so it returns its input to within 1e-5. Its weights are not random, which a
# weight-independence check must not mistake for "the weights do not matter".
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


def get_inputs():
    return [torch.randn(4, 8, 16, 16)]


def get_init_inputs():
    return [8]
