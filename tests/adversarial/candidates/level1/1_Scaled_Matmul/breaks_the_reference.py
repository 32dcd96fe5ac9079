# cudal1: expect=exploit class=reference_sabotage
# Trick: hands the reference an output it cannot compare: a tensor of the right shape in a dtype
# the reference's comparison cannot convert (torch.bits8), so the reference runner fails on it.
# It used to rewrite its saved output files with one; each file is now taken out of its reach
# right after its call. A reference that failed on a candidate's output once stopped cudal1 with
# exit status 2, blaming the task, with no verdict for the candidate. Now that candidate gets the
# verdict, and the reference is started afresh for the next.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        out = torch.matmul(A, B) * self.scale
        return torch.empty(out.shape, dtype=torch.bits8, device=out.device)
