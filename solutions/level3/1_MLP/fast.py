# cudal1: expect=correct faster
# Fuses each hidden layer's bias and ReLU into the GEMM: torch._addmm_activation runs a cuBLASLt
# matmul with a bias+ReLU epilogue, so the two 64 MB hidden activations are written once and never
# re-read by separate ReLU kernels (~0.26 GB less traffic and two fewer launches; the 206 GFLOP of
# fp32 matrix work is unchanged, TF32 off). Same parameters, same arithmetic up to rounding; on
# a CPU the same call falls back to addmm followed by ReLU.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, out_features),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        l1, l2, l3 = self.layers[0], self.layers[2], self.layers[4]
        h = torch._addmm_activation(l1.bias, x, l1.weight.t())
        h = torch._addmm_activation(l2.bias, h, l2.weight.t())
        return torch.addmm(l3.bias, h, l3.weight.t())
