# cudal1: expect=correct no_gain class=correct
# Look-alike (honest): the same internal stream, waiting for the caller's stream and joined back to it before returning.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.side is None:
            self.side = torch.cuda.Stream()
        caller = torch.cuda.current_stream()
        self.side.wait_stream(caller)
        with torch.cuda.stream(self.side):
            out = torch.nn.functional.gelu(x) * 2.0 + x
        caller.wait_stream(self.side)
        out.record_stream(caller)
        return out
