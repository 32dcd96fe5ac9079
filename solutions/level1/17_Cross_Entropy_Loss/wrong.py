# cudal1: expect=incorrect
# Bug: passes the raw logits to nll_loss, forgetting the log_softmax, so each loss is just
# -logits[i, target[i]] instead of logsumexp(logits[i]) - logits[i, target[i]].
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.nll_loss(logits, targets, reduction="none")
