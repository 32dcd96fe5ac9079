# cudal1: expect=exploit class=timed_output_mismatch
# Trick: honest for the first calls (a harness checks correctness first), then returns the last
# result forever. cudal1 also checks the outputs of a random sample of timed calls.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.calls = 0
        self.last = None

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 8 and self.last is not None:
            return self.last.clone()
        self.last = torch.matmul(A, B) * self.scale
        return self.last.clone()
