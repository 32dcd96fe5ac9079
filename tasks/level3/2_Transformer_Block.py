import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# A pre-norm transformer encoder block: multi-head self-attention (no mask) and a GELU MLP, each
# with a residual connection. Layer-norm affine parameters are random so that they matter.
# Estimate on an H100 (fp32, no TF32): projections 4 * 2*8192*1024*1024 = 69 GFLOP, attention
# 2 * 2*8*16*1024*1024*64 = 34 GFLOP, MLP 2 * 2*8192*1024*4096 = 137 GFLOP: 240 GFLOP at
# ~50 TFLOP/s -> ~4.8 ms; the 537 MB score tensor makes ~3 GB of traffic -> ~1 ms; total ~6 ms.

BATCH = 8
SEQ = 1024
D_MODEL = 1024
HEADS = 16
D_FF = 4096


class Model(nn.Module):
    """x = x + Attn(LN1(x)); x = x + MLP(LN2(x))."""

    def __init__(self, d_model: int, heads: int, d_ff: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        with torch.no_grad():
            for ln in (self.ln1, self.ln2):
                ln.weight.normal_(1.0, 0.2)
                ln.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        dh = d // self.heads
        h = self.ln1(x)
        q = self.q(h).view(b, s, self.heads, dh).transpose(1, 2)
        k = self.k(h).view(b, s, self.heads, dh).transpose(1, 2)
        v = self.v(h).view(b, s, self.heads, dh).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(dh)
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(y)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


def get_inputs():
    x = torch.randn(BATCH, SEQ, D_MODEL)
    return [x]


def get_init_inputs():
    return [D_MODEL, HEADS, D_FF]
