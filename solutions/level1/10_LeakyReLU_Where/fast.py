# cudal1: expect=correct faster
# F.leaky_relu is the same function as one fused elementwise kernel (x if x > 0 else x * slope):
# ~1.6 GB of traffic instead of a mask, a product and a select (~5.2 GB).
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, self.negative_slope)
