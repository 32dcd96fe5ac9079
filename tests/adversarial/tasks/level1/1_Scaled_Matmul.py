import torch
import torch.nn as nn

# Adversarial corpus task: C = (A @ B) * scale, small enough for one CPU core.

M = 128
K = 256
N = 128


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B) * self.scale


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return [0.5]
