"""Seed every generator a task might draw from, so that a seed fixes the inputs."""

import random

import torch

try:  # numpy is optional; tasks that use it need it seeded too
    import numpy as _np
except Exception:  # pragma: no cover - depends on the environment
    _np = None


def seed_all(seed: int) -> None:
    # torch.manual_seed also seeds every CUDA device's generator.
    torch.manual_seed(seed)
    random.seed(seed)
    if _np is not None:
        _np.random.seed(seed % 2**32)
