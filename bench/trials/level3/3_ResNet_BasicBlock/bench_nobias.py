# cudal1: expect=correct faster
# Trial: folded batch norm with cuDNN autotuning (benchmark mode picks the fastest algorithm for
# these shapes on the first call) and convolutions without a bias argument; the folded shift is
# added in place together with the ReLU.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True


def _randomise(bn: nn.BatchNorm2d) -> None:
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.3, 0.3)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 1.5)


def _folded(conv: nn.Conv2d, bn: nn.BatchNorm2d):
    scale = bn.weight * torch.rsqrt(bn.running_var + bn.eps)
    return conv.weight * scale.view(-1, 1, 1, 1), bn.bias - bn.running_mean * scale


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        _randomise(self.bn1)
        _randomise(self.bn2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w1, b1 = _folded(self.conv1, self.bn1)
        w2, b2 = _folded(self.conv2, self.bn2)
        out = F.conv2d(x, w1, padding=1).add_(b1.view(1, -1, 1, 1)).relu_()
        out = F.conv2d(out, w2, padding=1).add_(b2.view(1, -1, 1, 1))
        return out.add_(x).relu_()
