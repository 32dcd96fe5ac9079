"""Seed every generator a task might draw from, so that a seed fixes the inputs."""

import random

import torch

try:  # numpy is optional; tasks that use it need it seeded too
    import numpy as _np
except Exception:  # pragma: no cover - depends on the environment
    _np = None

_MASK64 = (1 << 64) - 1


def seed_all(seed: int) -> None:
    # torch.manual_seed also seeds every CUDA device's generator.
    torch.manual_seed(seed)
    random.seed(seed)
    if _np is not None:
        _np.random.seed(seed % 2**32)


def mix(seed: int, index: int) -> int:
    """A seed in [0, 2^63) derived from ``seed`` and ``index`` (splitmix64)."""
    z = (seed + (index + 1) * 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) >> 1


def reseed_for_call(seed: int) -> None:
    """Before a model call: the generators are seeded from the call's own input seed, which the
    Rust side draws from fresh randomness for every call (docs/protocol.md), so what they reveal
    says nothing about any other call's inputs.

    A model that draws random numbers in ``forward`` gets the same numbers in both roles.
    """
    seed_all(mix(seed, 0x5EED))
