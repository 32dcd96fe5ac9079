# cudal1: expect=correct faster
# The same two-layer LSTM as one nn.LSTM(num_layers=2, batch_first=True) call: cuDNN runs each
# layer's input projection for all time steps as one GEMM and the recurrence in persistent
# kernels, instead of ~1000 small kernel launches from a Python loop. nn.LSTM registers its
# parameters in the same order and shapes as two LSTMCells (w_ih, w_hh, b_ih, b_hh per layer) and
# initialises them with the same uniform(-1/sqrt(H), 1/sqrt(H)) calls, so the weights are
# identical. fp32; with cudnn.allow_tf32 off cuDNN uses FMA math, so only rounding differs.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return out
