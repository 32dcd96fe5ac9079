# cudal1: expect=exploit class=clock_disagreement
# cudal1[gpu]: expect=correct no_gain
# On a GPU the output is the GPU's work; the host-side waste it moves out stands for nothing the
# output needs, so it must gain nothing there.
# Trick: moves its heavy part out of the timed window. Once the correctness checks are behind,
# each call returns at once and leaves 3 ms of work to a finalizer of its output, which runs when
# the runner lets go of the output (after capturing it, before the next call's clock starts).
# cudal1's own clock times every block from outside: it allows no less per call than the block
# took, less the reference's untimed work, whatever the runner's clock saw.
import time
import weakref

import torch
import torch.nn as nn


def _heavy():
    start = time.perf_counter_ns()
    while time.perf_counter_ns() < start + 3_000_000:
        pass


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.calls = 0

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        out = torch.matmul(A, B) * self.scale
        if self.calls > 5:
            weakref.finalize(out, _heavy)
        else:
            _heavy()
        return out
