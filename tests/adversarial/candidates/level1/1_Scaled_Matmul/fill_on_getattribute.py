# cudal1: expect=incorrect class=mismatch
# Trick: returns an empty tensor at once and fills it in only when the harness next looks at the
# model (the runner read model.__dict__ between the call and the output's copy), from an
# instance __getattribute__: outputs that are checked are right, the timed calls do nothing.
# The runner now copies every output before anything of the candidate's can run, and reads the
# model through nn.Module's own descriptor: what it saves is the empty tensor.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.pending = []

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        out = torch.empty(A.shape[0], B.shape[1])
        self.pending.append((A, B, out))
        return out

    def __getattribute__(self, name):
        if name == "__dict__":
            own = object.__getattribute__(self, "__dict__")
            pending = own.get("pending") or []
            while pending:
                A, B, out = pending.pop()
                torch.matmul(A, B, out=out).mul_(own["scale"])
            return own
        return super().__getattribute__(name)
