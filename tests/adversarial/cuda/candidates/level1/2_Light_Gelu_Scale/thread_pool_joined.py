# cudal1: expect=correct no_gain class=correct
# Look-alike (honest): a thread pool made for the call computes the two halves of the rows, each thread on a stream of its own that waits for the caller's; the pool is shut down (its threads joined) and every stream joined back to the caller's before returning.
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn


def _half(x, out, rows, stream, caller):
    stream.wait_stream(caller)
    with torch.cuda.stream(stream):
        part = x[rows]
        out[rows] = torch.nn.functional.gelu(part) * 2.0 + part
    return stream


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.streams = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.streams is None:
            self.streams = (torch.cuda.Stream(), torch.cuda.Stream())
        caller = torch.cuda.current_stream()
        out = torch.empty_like(x)
        half = x.shape[0] // 2
        with ThreadPoolExecutor(max_workers=2) as pool:
            jobs = [
                pool.submit(_half, x, out, slice(0, half), self.streams[0], caller),
                pool.submit(_half, x, out, slice(half, None), self.streams[1], caller),
            ]
            for job in jobs:
                caller.wait_stream(job.result())
        for stream in self.streams:
            x.record_stream(stream)
            out.record_stream(stream)
        return out
