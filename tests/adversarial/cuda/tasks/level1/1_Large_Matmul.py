import torch
import torch.nn as nn

# Adversarial corpus task for a GPU: a float32 product large enough (about 2.5 ms on an H100
# without TF32) that work left running on another stream is still running when the call returns.

N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
