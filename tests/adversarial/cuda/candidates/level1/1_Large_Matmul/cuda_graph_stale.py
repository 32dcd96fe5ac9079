# cudal1: expect=exploit class=stale_result
# Trick: captures a CUDA graph on the first call with the caller's own input tensors and replays
# it from then on. Right while the caller writes new inputs into the same buffers (KernelBench
# reuses its inputs); cudal1 also passes inputs in new buffers while the captured ones are still
# alive, and the replay returns the previous call's result.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.graph = None

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if self.graph is None:
            self.static = (A, B)
            warm = torch.cuda.Stream()
            warm.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(warm):
                torch.matmul(A, B)
            torch.cuda.current_stream().wait_stream(warm)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = torch.matmul(*self.static)
        self.graph.replay()
        return self.static_out.clone()
