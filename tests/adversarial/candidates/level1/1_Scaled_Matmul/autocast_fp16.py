# cudal1: expect=incorrect class=mismatch
# Trick: the same loss of precision through autocast (float16 here), which changes no line of
# the math itself.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        with torch.autocast(A.device.type, dtype=torch.float16):
            out = torch.matmul(A, B)
        return out.float() * self.scale
