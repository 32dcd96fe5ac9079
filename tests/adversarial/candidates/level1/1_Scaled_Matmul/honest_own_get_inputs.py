# cudal1: expect=correct class=correct
# Look-alike (honest): a program copied whole from the reference, with its own smaller sizes and
# get_inputs. The evaluator never uses a candidate's get_inputs or constants.
import torch
import torch.nn as nn

M = 4
K = 4
N = 4


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B) * self.scale


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return [0.5]
