"""Keep the protocol streams out of reach of task and candidate code.

The real stdout moves to a private descriptor and fd 1 points at stderr, so a ``print()`` or a C
``printf`` in loaded code lands in the log instead of the reply stream. The real stdin moves to a
private descriptor too and fd 0 reads /dev/null, so loaded code cannot swallow requests.
Descriptors made by ``os.dup`` are not inherited by child processes (ninja, nvcc).
"""

import io
import json
import math
import os
import sys


class Channel:
    """Requests in, replies out, over the private descriptors."""

    def __init__(self, request_fd: int, reply_fd: int) -> None:
        self._requests = io.open(request_fd, "rb", buffering=1 << 16, closefd=True)
        self._reply_fd = reply_fd

    def read_line(self):
        """The next request line as bytes, or None at end of input."""
        line = self._requests.readline()
        if not line:
            return None
        return line

    def send(self, reply: dict) -> None:
        data = (encode(reply) + "\n").encode("utf-8")
        view = memoryview(data)
        # A pipe may accept less than the whole line; loop so one reply is always one line.
        while view:
            written = os.write(self._reply_fd, view)
            view = view[written:]


def encode(reply: dict) -> str:
    """Compact JSON; NaN and infinities (not JSON) become null."""
    try:
        return json.dumps(reply, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(reply), separators=(",", ":"), allow_nan=False)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def install() -> Channel:
    """Move stdin/stdout to private descriptors; return the channel that uses them."""
    sys.stdout.flush()
    sys.stderr.flush()
    reply_fd = os.dup(1)
    request_fd = os.dup(0)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr
    sys.stdin = open(os.devnull, "r")
    return Channel(request_fd, reply_fd)
