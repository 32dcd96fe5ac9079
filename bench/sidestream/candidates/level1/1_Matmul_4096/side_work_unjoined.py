# cudal1: expect=correct
# Its output is computed on the caller's stream, but each call also leaves a second product
# running on a private stream that is never joined. The output is right, so only the clock can
# see that work: the call window ends when forward returns, the until-idle window when the device
# is idle. cudal1 must notice the difference, time both sides until idle, and measure this at
# about 0.5x (two products per call).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = None
        self.scratch = None

    def forward(self, a, b):
        if self.stream is None:
            self.stream = torch.cuda.Stream()
        out = a @ b
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            self.scratch = b @ a
        return out
