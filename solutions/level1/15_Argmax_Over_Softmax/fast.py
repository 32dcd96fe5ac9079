# cudal1: expect=correct faster
# Softmax is strictly increasing within each column, so argmax(softmax(x)) = argmax(x): skip the
# softmax (which reads the 1.6 GB input several times and writes 1.6 GB) and run one argmax
# reduction over x (~1.6 GB read). Exactly equal here: scores are multiples of 0.01, so distinct
# scores give distinct probabilities, equal scores give equal ones, and torch.argmax returns the
# first maximal index in both cases.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=1)
