import torch
import torch.nn as nn

# Index of the largest softmax probability along dim 1 of a 3-D tensor of scores. Scores are
# multiples of 0.01 (quantised logits), so equal scores give exactly equal probabilities and
# ties go to the first index.
# 126M floats (0.5 GB; 201M with BATCH = 16); a softmax over a non-innermost dimension reads the input about three
# times and writes it once, argmax reads it again. Measured: 15.3 ms per call on an H200 with
# BATCH = 32 (2026-11-21, docs/bench/2026-11-21-gpu-session2), far above the ~2.7 ms estimate,
# so BATCH was halved; with BATCH = 16 an H100 still took 15.2 ms (docs/bench/2026-11-21-gpu-session3),
# so BATCH is now 10.

BATCH = 10
CLASSES = 8192
COLS = 1536


class Model(nn.Module):
    """y[b, j] = argmax_i softmax(x[b, :, j])[i]."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(torch.softmax(x, dim=1), dim=1)


def get_inputs():
    x = torch.randint(-5000, 5000, (BATCH, CLASSES, COLS)).float() / 100.0
    return [x]


def get_init_inputs():
    return []
