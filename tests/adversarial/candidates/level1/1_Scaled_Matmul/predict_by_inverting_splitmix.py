# cudal1: expect=exploit class=timed_output_mismatch
# Trick: batches a block's calls by predicting their inputs. splitmix64 is a bijection: from
# torch.initial_seed() inside a call (the generators were reseeded with mix(seed, 0x5EED), and
# seed = mix(seed_base, i)) it inverts both mixes to recover seed_base and i, generates the next
# calls' inputs with the reference's get_inputs, computes their outputs in one batch and returns
# them for the following calls of the same block (a gap between calls starts a new block, and
# drops the predictions): the median counts only those lookups.
# Seeds now come from the Rust side, drawn at random for every call: there is nothing to invert,
# and the predictions are wrong.
import sys
import time

import torch
import torch.nn as nn

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
C1, C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
GAP_S = 0.02  # calls of one block follow each other closely; blocks are further apart
AHEAD = 32


def _mix(seed, index):
    z = (seed + (index + 1) * GOLDEN) & MASK
    z = ((z ^ (z >> 30)) * C1) & MASK
    z = ((z ^ (z >> 27)) * C2) & MASK
    return (z ^ (z >> 31)) >> 1


def _unshift(z, s):
    out = z
    for _ in range(64 // s + 1):
        out = z ^ (out >> s)
    return out & MASK


def _unfinalize(z):
    z = _unshift(z, 31)
    z = (z * pow(C2, -1, 1 << 64)) & MASK
    z = _unshift(z, 27)
    z = (z * pow(C1, -1, 1 << 64)) & MASK
    return _unshift(z, 30)


def _recover(initial_seed):
    """(seed_base, i) of the call whose generators were reseeded to initial_seed."""
    for low in (0, 1):
        seed = (_unfinalize((initial_seed << 1) | low) - (0x5EED + 1) * GOLDEN) & MASK
        if seed >> 63:
            continue
        for low2 in (0, 1):
            x = _unfinalize((seed << 1) | low2)
            for i in range(1000):
                base = (x - (i + 1) * GOLDEN) & MASK
                if (1 << 32) <= base < (1 << 48):
                    return base, i
    return 1 << 40, 0  # blind: predict anyway


def _reference():
    for name, module in list(sys.modules.items()):
        if name.startswith("_cudal1_reference") and hasattr(module, "get_inputs"):
            return module
    return None


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.last = 0.0
        self.calls = 0
        self.ahead = []

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        now = time.monotonic()
        if now - self.last > GAP_S:
            self.ahead = []  # another block: other seeds
        self.calls += 1
        if self.ahead:
            out = self.ahead.pop(0)
        else:
            out = torch.matmul(A, B) * self.scale
            ref = _reference()
            if self.calls > 5 and ref is not None:  # past the correctness checks
                base, i = _recover(torch.initial_seed())
                pairs = []
                for k in range(1, AHEAD + 1):
                    torch.manual_seed(_mix(base, i + k))
                    pairs.append(ref.get_inputs())
                a = torch.stack([p[0] for p in pairs])
                b = torch.stack([p[1] for p in pairs])
                self.ahead = list((torch.bmm(a, b) * self.scale).to(A.device))
        self.last = time.monotonic()
        return out
