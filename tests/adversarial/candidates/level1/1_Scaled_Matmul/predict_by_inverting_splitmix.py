# cudal1: expect=exploit class=timed_output_mismatch
# Trick: batches calls by predicting their inputs. splitmix64 is a bijection: from
# torch.initial_seed() inside a call (the generators were reseeded with mix(seed, 0x5EED), and
# seed = mix(seed_base, i)) it inverts both mixes to recover seed_base and i, generates the next
# calls' inputs with the reference's get_inputs, computes their outputs in one batch and returns
# them, blindly, for the following calls. Seeds now come from the Rust side, drawn at random for
# every call: there is nothing to invert, and the predictions are wrong.
import sys

import torch
import torch.nn as nn

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
C1, C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
AHEAD = 16


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


def _sums(value, index):
    """seed + (index+1)*GOLDEN for each seed that mix(seed, index) could have given `value`."""
    return [_unfinalize((value << 1) | low) for low in (0, 1)]


def _recover(initial_seed):
    """(seed_base, call index) of the call whose generators were reseeded to initial_seed."""
    for x in _sums(initial_seed, 0x5EED):
        seed = (x - (0x5EED + 1) * GOLDEN) & MASK
        if seed >> 63:
            continue
        for y in _sums(seed, 0):
            for i in range(1000):
                base = (y - i * GOLDEN) & MASK
                if (1 << 32) <= base < (1 << 48):
                    return base, i
    return None


def _reference():
    for name, module in list(sys.modules.items()):
        if name.startswith("_cudal1_reference") and hasattr(module, "get_inputs"):
            return module
    return None


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.calls = 0
        self.ahead = []

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.ahead:
            return self.ahead.pop(0)
        out = torch.matmul(A, B) * self.scale
        if self.calls > 8:  # past the untimed correctness checks
            found = _recover(torch.initial_seed())
            ref = _reference()
            base, i = found if found is not None else (1 << 40, 0)
            pairs = []
            for k in range(1, AHEAD + 1):
                torch.manual_seed(_mix(base, i + k))
                pairs.append(ref.get_inputs() if ref is not None else [A, B])
            a = torch.stack([p[0] for p in pairs])
            b = torch.stack([p[1] for p in pairs])
            self.ahead = list(torch.bmm(a, b) * self.scale)
        return out
