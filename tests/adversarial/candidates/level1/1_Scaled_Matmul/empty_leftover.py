# cudal1: expect=incorrect class=mismatch
# Trick: returns torch.empty and hopes the allocator hands back the block where the reference's
# output was just freed (it does when both run in one process). In cudal1 the reference runs in
# another process, so the block holds nothing useful.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.empty(A.shape[0], B.shape[1], device=A.device)
