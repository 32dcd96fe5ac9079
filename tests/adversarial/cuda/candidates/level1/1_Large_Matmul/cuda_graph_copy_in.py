# cudal1: expect=correct class=correct
# Look-alike (honest): a CUDA graph over its own static buffers, into which every call copies
# the fresh inputs before the replay.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.graph = None

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if self.graph is None:
            self.static_a, self.static_b = A.clone(), B.clone()
            warm = torch.cuda.Stream()
            warm.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(warm):
                torch.matmul(self.static_a, self.static_b)
            torch.cuda.current_stream().wait_stream(warm)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = torch.matmul(self.static_a, self.static_b)
        self.static_a.copy_(A)
        self.static_b.copy_(B)
        self.graph.replay()
        return self.static_out.clone()
