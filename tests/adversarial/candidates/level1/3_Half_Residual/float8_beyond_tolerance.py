# cudal1: expect=incorrect class=mismatch
# Trick: rounds the input to 8-bit floats (3 mantissa bits) before computing: lower precision
# beyond float16's tolerance. The honest verdict is wrong values.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.to(torch.float8_e4m3fn).float()
        return (1.5 * y + torch.sin(y)).half()
