# cudal1: expect=correct class=correct
# Look-alike (honest): writes below a fixed /tmp path at load and in every call and reads it back,
# as programs that build or cache there do (`load_inline(build_directory="/tmp/...")`). Each
# sandboxed runner has a /tmp of its own that ends with it, so this is allowed and reaches nobody:
# a mark left there by an earlier runner (its twin honest_private_tmp_b.py, which writes the
# same path, or an earlier process of its own) would make its outputs wrong. Before the private
# /tmp, the write was refused (PermissionError: runtime_error).
import os
import secrets

import torch
import torch.nn as nn

SHARED = "/tmp/cudal1-probe-5e1d0c7a"
MARK = os.path.join(SHARED, "mark")
# This process's: a mark with another token was left by another process.
TOKEN = secrets.token_hex(8)


def _write_and_read(path: str, text: str) -> bool:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    with open(path) as f:
        return f.read() == text


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.leaked = False
        if os.path.exists(MARK):
            with open(MARK) as f:
                self.leaked = f.read() != TOKEN
        if not _write_and_read(MARK, TOKEN):
            self.leaked = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _write_and_read(os.path.join(SHARED, "call"), TOKEN):
            self.leaked = True
        y = torch.nn.functional.gelu(self.linear(x))
        return y + 1.0 if self.leaked else y
