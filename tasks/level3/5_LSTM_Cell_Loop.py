import torch
import torch.nn as nn

# A two-layer LSTM written as a Python loop over time steps with nn.LSTMCell, returning the top
# layer's hidden state at every step.
# Estimate on an H100: ~1 GFLOP of small matrix products per step is trivial; the cost is
# 2 layers * 128 steps of several small kernels each (~1000 launches, ~5 us each) -> ~5-8 ms.
# Measured with SEQ = 128 on an H100 (2026-11-21, docs/bench/2026-11-21-gpu-session3): 16.2 ms
# by the evaluator (13.8 ms without its L2 flushes and synchronisations); with SEQ = 96, 13.3 ms
# by the evaluator and 12.0-16.9 ms (median 15.5) by bench/eager_times.py on another H100. The
# loop is bound by the host's kernel launches, so its time moves with the CPU: SEQ is now 64.

BATCH = 64
SEQ = 64
INPUT = 512
HIDDEN = 1024


class Model(nn.Module):
    """out[:, t] = h2_t where (h1_t, c1_t) = cell1(x_t, ...), (h2_t, c2_t) = cell2(h1_t, ...)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.cell1 = nn.LSTMCell(input_size, hidden_size)
        self.cell2 = nn.LSTMCell(hidden_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h1 = x.new_zeros(b, self.hidden_size)
        c1 = x.new_zeros(b, self.hidden_size)
        h2 = x.new_zeros(b, self.hidden_size)
        c2 = x.new_zeros(b, self.hidden_size)
        outputs = []
        for step in range(t):
            h1, c1 = self.cell1(x[:, step], (h1, c1))
            h2, c2 = self.cell2(h1, (h2, c2))
            outputs.append(h2)
        return torch.stack(outputs, dim=1)


def get_inputs():
    x = torch.randn(BATCH, SEQ, INPUT)
    return [x]


def get_init_inputs():
    return [INPUT, HIDDEN]
