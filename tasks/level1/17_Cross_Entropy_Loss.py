import torch
import torch.nn as nn
import torch.nn.functional as F

# Per-sample cross-entropy of logits against integer class targets (reduction="none": a scalar
# mean is a weak check, since a wrong-axis bug gives a statistically identical mean at 1e-4).
# Logits 537M floats (2.1 GB). Measured: 0.68 ms per call on an H200 with BATCH = 16384
# (2026-11-21, docs/bench/2026-11-21-gpu-session2), below the 1 ms floor, so BATCH was doubled.

BATCH = 32768
CLASSES = 16384


class Model(nn.Module):
    """loss[i] = logsumexp(logits[i]) - logits[i, target[i]]."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets, reduction="none")


def get_inputs():
    logits = torch.randn(BATCH, CLASSES) * 2.0
    targets = torch.randint(0, CLASSES, (BATCH,))
    return [logits, targets]


def get_init_inputs():
    return []
