import torch
import torch.nn as nn

# A three-layer perceptron with ReLU activations.
# Estimate on an H100 (fp32, no TF32): 2*4096*(1024*4096 + 4096*4096 + 4096*1024) = 206 GFLOP at
# ~50 TFLOP/s -> ~4.1 ms, plus ~0.3 GB of activation traffic.

BATCH = 4096
IN_FEATURES = 1024
HIDDEN = 4096
OUT_FEATURES = 1024


class Model(nn.Module):
    """Linear -> ReLU -> Linear -> ReLU -> Linear."""

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
        return self.layers(x)


def get_inputs():
    x = torch.randn(BATCH, IN_FEATURES)
    return [x]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN, OUT_FEATURES]
