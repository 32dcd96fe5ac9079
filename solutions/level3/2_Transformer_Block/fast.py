# cudal1: expect=correct faster
# Same block with less memory traffic and fewer launches:
# - the three Q/K/V projections run as one GEMM against the stacked weights (N = 3*d_model);
# - the 1/sqrt(d_head) scale is folded into the stacked Q weights and bias, so the division pass
#   over the 537 MB score tensor disappears (for d_head = 64 the scale is 1/8, a power of two,
#   so the scores are bit-identical);
# - each residual add rides in its GEMM: addmm(x + bias, y, W^T) with beta = 1;
# - layer norms through F.layer_norm (one kernel each), as nn.LayerNorm does.
# Everything fp32 with TF32 off; weights are restacked from the current parameters on every call.
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
        heads = self.heads
        dh = d // heads
        scale = 1.0 / math.sqrt(dh)
        x2 = x.reshape(b * s, d)
        h = F.layer_norm(x2, (d,), self.ln1.weight, self.ln1.bias, self.ln1.eps)
        w_qkv = torch.cat([self.q.weight * scale, self.k.weight, self.v.weight], dim=0)
        b_qkv = torch.cat([self.q.bias * scale, self.k.bias, self.v.bias], dim=0)
        qkv = torch.addmm(b_qkv, h, w_qkv.t()).view(b, s, 3, heads, dh).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b * s, d)
        x1 = torch.addmm(x2 + self.o.bias, y, self.o.weight.t())
        h2 = F.layer_norm(x1, (d,), self.ln2.weight, self.ln2.bias, self.ln2.eps)
        f = F.gelu(torch.addmm(self.fc1.bias, h2, self.fc1.weight.t()))
        out = torch.addmm(x1 + self.fc2.bias, f, self.fc2.weight.t())
        return out.view(b, s, d)
