# cudal1: expect=correct
# Writes a file below a fixed /tmp path at load and in every call, and reads it back: a program
# that runs anywhere (each sandboxed runner has a /tmp of its own; it was runtime_error before).
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

DIR = "/tmp/cudal1-suite-fixed-tmp"


def _round_trip(name: str, text: str) -> None:
    os.makedirs(DIR, exist_ok=True)
    path = os.path.join(DIR, name)
    with open(path, "w") as f:
        f.write(text)
    with open(path) as f:
        if f.read() != text:
            raise RuntimeError(f"{path} did not read back")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        _round_trip("load.txt", "loaded")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _round_trip("forward.txt", str(x.shape))
        return F.silu(x)
