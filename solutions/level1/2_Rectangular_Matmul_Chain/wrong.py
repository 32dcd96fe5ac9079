# cudal1: expect=incorrect
# Bug: re-associates correctly but has an off-by-one in the inner dimension: it drops the last
# column of A and the last row of B @ C, so one of the K inner terms is missing from every output.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
        bc = torch.matmul(B, C)
        return torch.matmul(A[:, :-1], bc[:-1])
