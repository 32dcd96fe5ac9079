# cudal1: expect=incorrect
# Bug: normalises over the batch dimension (log_softmax along dim 0) instead of over the classes,
# then picks the target entries: a plausible axis mix-up that still returns a scalar.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits, dim=0)
        return -logp.gather(1, targets.unsqueeze(1)).mean()
