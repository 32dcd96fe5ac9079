"""Keep the reply stream clean: the real stdout moves to a private descriptor and fd 1 points at
stderr, so progress bars and warnings from transformers (or a stray print) land in the log."""

import io
import json
import os
import sys


class Channel:
    """Request lines in, reply objects out."""

    def __init__(self, requests, reply_fd: int) -> None:
        self._requests = requests
        self._reply_fd = reply_fd

    def read_line(self):
        """The next request line (bytes), or None at end of input."""
        line = self._requests.readline()
        return line or None

    def send(self, reply: dict) -> None:
        data = (json.dumps(reply, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        view = memoryview(data)
        # A pipe may take less than the whole line; loop so one reply is always one line.
        while view:
            view = view[os.write(self._reply_fd, view):]


def install() -> Channel:
    sys.stdout.flush()
    reply_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
    request_fd = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return Channel(io.open(request_fd, "rb", buffering=1 << 16), reply_fd)
