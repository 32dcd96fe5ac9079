# cudal1: expect=correct no_gain class=correct
# Trick (not meant as one): as side_stream_host_synced.py, but the host waits on an event recorded after the work: the same hidden window, another way to wait.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.side is None:
            self.side = torch.cuda.Stream()
        with torch.cuda.stream(self.side):
            y = torch.nn.functional.gelu(x)
            out = y * 2.0 + x
            done = torch.cuda.Event()
            done.record(self.side)
        done.synchronize()
        return out
