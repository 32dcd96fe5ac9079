import torch
import torch.nn as nn

# CPU-suite task: a linear layer followed by ReLU (small sizes).

BATCH = 64
IN_FEATURES = 64
OUT_FEATURES = 128


class Model(nn.Module):
    """y = relu(linear(x))."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
