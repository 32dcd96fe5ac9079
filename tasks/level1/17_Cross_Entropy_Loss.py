import torch
import torch.nn as nn
import torch.nn.functional as F

# Per-sample cross-entropy of logits against integer class targets (reduction="none": a scalar
# mean is a weak check, since a wrong-axis bug gives a statistically identical mean at 1e-4).
# Estimate on an H100: logits 268M floats (1.07 GB); log_softmax reads them twice and writes them
# once, the loss gathers one value per row: ~3.2 GB at ~3 TB/s -> ~1.1 ms.

BATCH = 16384
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
