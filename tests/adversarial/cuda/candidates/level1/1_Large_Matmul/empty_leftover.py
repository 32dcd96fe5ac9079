# cudal1: expect=incorrect class=mismatch
# Trick: returns torch.empty, hoping the caching allocator hands back the block that held the
# reference's output (it does when both run in one process). In cudal1 the reference runs in
# another process.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.empty(A.shape[0], B.shape[1], device=A.device)
