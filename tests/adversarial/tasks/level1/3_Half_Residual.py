import torch
import torch.nn as nn

# Adversarial corpus task in float16: computed in float32 and rounded once, so a candidate that
# computes in float16 throughout differs by a few units in the last place (within fp16's 1e-2).

SIZE = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        return (1.5 * y + torch.sin(y)).half()


def get_inputs():
    return [torch.randn(SIZE, SIZE).half()]


def get_init_inputs():
    return []
