# cudal1: expect=exploit class=busy_while_idle
# Trick: slows the reference down instead of speeding itself up. A native thread (started with
# pthread_create through ctypes, so not through Python's threading) keeps a core busy with
# products while the harness times the reference on the same machine. The runner sees its
# process using CPU between requests.
import ctypes

import torch
import torch.nn as nn

_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)


# Made here, not in the thread: a draw from the global generator while the harness makes the
# inputs would change them, and the program would be merely wrong instead of busy.
_X = torch.ones(256, 256)


def _burn(_):
    while True:
        torch.mm(_X, _X)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self._callback = _CALLBACK(_burn)
        self._thread = ctypes.c_ulong()
        ctypes.CDLL(None).pthread_create(ctypes.byref(self._thread), None, self._callback, None)

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B) * self.scale
