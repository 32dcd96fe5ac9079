# cudal1: expect=correct
# The honest look-alike: work on an internal stream, joined back to the caller's stream before
# returning. Also about 1.0x.
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
        torch.cuda.current_stream().wait_stream(self.stream)
        return out
