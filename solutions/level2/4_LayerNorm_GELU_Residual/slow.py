# cudal1: expect=correct
# Layer norm spelled out (mean, centred squares, variance, normalise, affine) followed by GELU
# and the residual add: about ten elementwise/reduction kernels with temporaries instead of
# three. Correct within rounding, roughly 2-3x the reference's memory traffic.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.3)
            self.norm.bias.normal_(0.0, 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        centred = x - mean
        var = (centred * centred).mean(dim=-1, keepdim=True)
        h = centred / torch.sqrt(var + self.norm.eps) * self.norm.weight + self.norm.bias
        return x + F.gelu(h)
