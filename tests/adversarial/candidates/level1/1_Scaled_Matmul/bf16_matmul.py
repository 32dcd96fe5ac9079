# cudal1: expect=incorrect class=mismatch
# Trick: rounds the float32 operands to bfloat16 (8 mantissa bits) as tensor cores would take
# them, accumulating in float32: faster on a GPU, and far outside float32's 1e-4 tolerance. The
# honest verdict is simply wrong values. (The rounding is done before an fp32 product because
# oneDNN's bf16 GEMM dies with SIGILL on some CPUs.)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A.bfloat16().float(), B.bfloat16().float()) * self.scale
