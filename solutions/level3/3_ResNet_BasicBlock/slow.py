# cudal1: expect=correct
# Slower than the reference (0.89x on an H100, docs/bench/2026-11-21-gpu-session3), though it
# looks faster on paper: folding the batch norms into the weights costs a handful of tiny
# kernels every call, whose launches take more time than the passes they save.
# Inference-mode batch norm folded into each convolution (w' = w * g / sqrt(v + eps),
# b' = beta - mean * g / sqrt(v + eps), recomputed from the parameters every call: ~0.6 MB of
# work), ReLU in place on the first convolution's output, and the shortcut add plus final ReLU
# done in place on the second: two batch-norm passes (read + write of 51 MB each) and two
# temporaries disappear. fp32 with TF32 off; folding changes rounding only.
import torch
import torch.nn as nn
import torch.nn.functional as F


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
        out = F.conv2d(x, w1, b1, padding=1).relu_()
        out = F.conv2d(out, w2, b2, padding=1)
        return out.add_(x).relu_()
