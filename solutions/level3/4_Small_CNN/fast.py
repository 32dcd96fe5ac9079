# cudal1: expect=correct faster
# ReLU and 2x2 max pooling commute (max of ReLUs = ReLU of the max, exactly), so each stage pools
# first and applies ReLU in place on the 4x smaller pooled map: the full-resolution ReLU passes
# (the largest is 268 MB read + written at batch 512) disappear. The first classifier layer's
# bias and ReLU run in the cuBLASLt epilogue (torch._addmm_activation). Same parameters, created in
# the same order; bit-identical feature maps, fp32 with TF32 off.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
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
        f = self.features
        for conv, pool in ((f[0], f[2]), (f[3], f[5]), (f[6], f[8])):
            x = pool(conv(x)).relu_()
        fc1, fc2 = self.classifier[0], self.classifier[2]
        h = torch._addmm_activation(fc1.bias, torch.flatten(x, 1), fc1.weight.t())
        return torch.addmm(fc2.bias, h, fc2.weight.t())
