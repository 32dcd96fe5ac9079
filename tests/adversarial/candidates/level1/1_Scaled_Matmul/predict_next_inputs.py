# cudal1: expect=exploit class=timed_output_mismatch
# Trick: batches several calls into one launch. A harness that seeds call i with seed_base + i
# lets the program read torch.initial_seed(), generate the next calls' inputs itself with the
# reference's get_inputs, compute all their outputs in one batched product, and answer the
# following back-to-back (timed) calls from that batch. cudal1 derives each call's seed with a
# hash and reseeds the generators before the call, so the predictions are for inputs that never
# come.
import sys
import time

import torch
import torch.nn as nn

AHEAD = 8


def _reference_module():
    for name, module in list(sys.modules.items()):
        if name.startswith("_cudal1_reference") and hasattr(module, "get_inputs"):
            return module
    return None


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.predicted = []
        self.last_time = 0.0
        self.gaps = []

    def _predict(self, seed: int, device: torch.device) -> None:
        ref = _reference_module()
        if ref is None:
            return
        pairs = []
        for k in range(1, AHEAD + 1):
            torch.manual_seed(seed + k)
            pairs.append(ref.get_inputs())
        a = torch.stack([p[0] for p in pairs])
        b = torch.stack([p[1] for p in pairs])
        self.predicted = list(torch.bmm(a.to(device), b.to(device)) * self.scale)

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        now = time.monotonic()
        # The first calls are the correctness checks; their gaps set the baseline.
        self.gaps.append(now - self.last_time)
        baseline = sorted(self.gaps[1:5])[len(self.gaps[1:5]) // 2] if len(self.gaps) > 5 else None
        quick = baseline is not None and self.gaps[-1] < baseline / 2
        if quick and self.predicted:
            out = self.predicted.pop(0)
        else:
            seed = torch.initial_seed()
            out = torch.matmul(A, B) * self.scale
            self._predict(seed, A.device)
        # The gap is measured from the end of one call to the start of the next.
        self.last_time = time.monotonic()
        return out
