# cudal1: expect=correct class=correct
# Look-alike (honest): the same internal stream, joined to the caller's stream before returning.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if self.side is None:
            self.side = torch.cuda.Stream()
        caller = torch.cuda.current_stream()
        out = torch.empty(A.shape[0], B.shape[1], device=A.device)
        self.side.wait_stream(caller)
        with torch.cuda.stream(self.side):
            torch.matmul(A, B, out=out)
        caller.wait_stream(self.side)
        return out
