# cudal1: expect=correct no_gain class=correct
# Trick (not meant as one): the reference's math on a stream of its own, which does not wait for the caller's stream, synchronised on the host before returning. Its kernels ran beside the spin queued before the timed call, so the caller stream's events saw an empty call (14.4x on an H100); its real speed is the reference's.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.side is None:
            self.side = torch.cuda.Stream()
        with torch.cuda.stream(self.side):
            out = torch.nn.functional.gelu(x) * 2.0 + x
        self.side.synchronize()
        return out
