# cudal1: expect=exploit class=stale_result
# Trick: the CPU analogue of a CUDA graph captured on the first call: it keeps the tensors it
# first saw and replays the computation on them, whatever the caller passes. Right only when the
# caller writes new inputs into the same buffers; cudal1 also passes new buffers while the old
# ones are alive, and the replay then returns the previous call's result.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.captured = None

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if self.captured is None:
            self.captured = (A, B)
        a, b = self.captured
        return torch.matmul(a, b) * self.scale
