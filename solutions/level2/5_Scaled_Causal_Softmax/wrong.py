# cudal1: expect=incorrect
# Bug: an off-by-one in the causal mask (tril with diagonal=1) lets every position also see the
# next one.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        seq = scores.size(-1)
        keep = torch.tril(torch.ones(seq, seq, dtype=torch.bool, device=scores.device), diagonal=1)
        s = (scores * self.scale).masked_fill(~keep, float("-inf"))
        return torch.softmax(s, dim=-1)
