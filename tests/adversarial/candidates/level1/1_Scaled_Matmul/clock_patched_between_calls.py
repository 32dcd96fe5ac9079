# cudal1: expect=correct class=correct
# Trick: a heavy call that reports a tenth of its time. After the correctness checks it points
# the runner's clock (once looked up at call time) at a function that shrinks the time since the
# call began, and puts the real one back from a finalizer of its output, which runs when the
# runner drops the output: by the time anything checks, nothing is replaced. The runner now reads
# its clock (and everything else a call's untimed part uses) once per block, before any call:
# the patch changes nothing and the call is judged as slow as it is. (cudal1's own clock around
# every block caught it before: work_after_the_call.py.)
import sys
import time
import weakref

import torch
import torch.nn as nn

_timing = sys.modules.get("cudal1_runner.timing")
_NAME = "clock" + "_ns"
_real = getattr(_timing, _NAME, time.perf_counter_ns)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.calls = 0

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        start = time.perf_counter_ns()
        out = torch.matmul(A, B) * self.scale
        while time.perf_counter_ns() < start + 3_000_000:  # the heavy part
            pass
        if self.calls > 5 and _timing is not None:
            setattr(_timing, _NAME, lambda: start + (_real() - start) // 10)
            weakref.finalize(out, setattr, _timing, _NAME, _real)
        return out
