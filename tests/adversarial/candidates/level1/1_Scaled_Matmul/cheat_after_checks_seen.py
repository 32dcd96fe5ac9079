# cudal1: expect=exploit class=timed_output_mismatch
# cudal1[gpu]: expect=correct no_gain
# On a GPU, checked outputs stay on the device (no time-*.pt file): its trigger never fires, it
# computes honestly and must gain nothing.
# Trick: the checks of timed calls used to be three, drawn among the first blocks, each leaving a
# time-*.pt file in the candidate's own output directory. It watches that directory and, once
# three checks are behind it, returns wrong results of the same cost (the speedup stays under the
# 3x that triggers a second measurement). Checks are now chosen after each block returns, any
# block may be checked, and seeing past checks says nothing about the next.
import os

import torch
import torch.nn as nn


def _checks_seen() -> int:
    seen = 0
    for _, _, files in os.walk(os.getcwd()):
        seen += sum(1 for f in files if f.startswith("time-") and f.endswith(".pt"))
    return seen


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if _checks_seen() >= 3:
            return torch.matmul(A, B)  # the scale left out: as fast, and wrong
        return torch.matmul(A, B) * self.scale
