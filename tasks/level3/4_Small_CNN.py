import torch
import torch.nn as nn

# A small image classifier: three conv-ReLU-maxpool stages and two fully connected layers.
# Estimate on an H100 (fp32, no TF32): convs 1.8 + 9.7 + 9.7 GFLOP and FC 4.3 GFLOP at batch 512
# ~ 50 GFLOP -> ~1 ms, plus ~3 GB of activation traffic (ReLU and pooling over the
# full-resolution maps) -> ~1 ms; total ~2 ms.

BATCH = 512
IMAGE = 64
NUM_CLASSES = 10


class Model(nn.Module):
    """[conv3x3 -> ReLU -> maxpool2] x 3 -> flatten -> FC -> ReLU -> FC."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Linear(128 * 8 * 8, 512),
            nn.ReLU(),
            nn.Linear(512, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return self.classifier(torch.flatten(x, 1))


def get_inputs():
    x = torch.randn(BATCH, 3, IMAGE, IMAGE)
    return [x]


def get_init_inputs():
    return [NUM_CLASSES]
