# cudal1: expect=incorrect
# Bug: splits the heads with a plain view of (batch, heads, seq, d_head) instead of
# view(batch, seq, heads, d_head).transpose(1, 2), so each "head" mixes features of several
# positions. Shapes all agree; the values do not.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
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
        q = self.q(h).reshape(b, self.heads, s, dh)
        k = self.k(h).reshape(b, self.heads, s, dh)
        v = self.v(h).reshape(b, self.heads, s, dh)
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(dh), dim=-1)
        y = torch.matmul(att, v).reshape(b, s, d)
        x = x + self.o(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
