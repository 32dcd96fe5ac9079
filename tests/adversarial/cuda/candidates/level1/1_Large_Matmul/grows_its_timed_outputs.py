# cudal1: expect=exploit class=timed_output_mismatch
# Trick: once past the correctness checks, returns an output too large for the runner to keep a
# copy of (an uninitialised 2.7 GB device tensor, made at once), so that no timed call could be
# chosen for checking. Blocks are sized so that outputs of the checked calls' size all fit; a
# block that kept fewer is a timed call returning something else. (On the CPU the copies and
# fingerprints of such outputs make the warm-up run out of time first.)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 5:
            return torch.empty(A.shape[0], B.shape[1] * 40, device=A.device)
        return torch.matmul(A, B)
