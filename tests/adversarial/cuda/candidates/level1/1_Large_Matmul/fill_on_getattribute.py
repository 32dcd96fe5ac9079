# cudal1: expect=incorrect class=mismatch
# Trick: returns an uninitialised device tensor at once and fills it in (one product) only when
# the harness next reads model.__dict__, from an instance __getattribute__: checked outputs were
# right, timed calls did nothing. The runner now copies every output on the device, with the
# candidate's code unable to run, before it inspects the model (through nn.Module's own
# descriptor): what it keeps is the unfilled tensor.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.pending = []

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        out = torch.full((A.shape[0], B.shape[1]), float("nan"), device=A.device)
        self.pending.append((A, B, out))
        return out

    def __getattribute__(self, name):
        if name == "__dict__":
            own = object.__getattribute__(self, "__dict__")
            pending = own.get("pending") or []
            while pending:
                A, B, out = pending.pop()
                torch.matmul(A, B, out=out)
            return own
        return super().__getattribute__(name)
