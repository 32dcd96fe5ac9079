# cudal1: expect=exploit
# The side-stream trick: the product is launched on a private stream and forward returns without
# waiting for it. A harness that records its end event on the current stream stops its clock
# before the work is done and reports a large speedup. cudal1 copies the output on the caller's
# stream as soon as the call returns; the copy differs from the finished output, so this is
# `exploit / output_not_ready` before any timing (`side_work_unjoined.py` shows the timing).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = None

    def forward(self, a, b):
        if self.stream is None:
            self.stream = torch.cuda.Stream()
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            out = a @ b
        return out
