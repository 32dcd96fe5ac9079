"""The wire every Python child of cudal1 speaks: one JSON object a line, requests on stdin and
replies on stdout, ``{"id", "ok": true, ...}`` or ``{"id", "ok": false, "error": {...}}``
(docs/protocol.md). The runner (``cudal1_runner``) and the model worker (``cudal1_model``) both
use this module, the one file python/cudal1_runner/wire.py (``cudal1_model/wire.py`` links to it,
and the binary installs it into each package): ``install`` guards the streams, ``Channel`` reads
requests and writes replies, ``serve`` is the loop, ``decode``/``encode`` the JSON, ``reply`` and
``refusal`` the envelope. It lives inside each package, so what the runner's tamper check watches
(``cudal1_runner.*``, ``tamper``) covers it as well.

The real stdout moves to a private descriptor and fd 1 points at stderr, so a ``print()`` or a C
``printf`` in loaded code lands in the log instead of the reply stream. The real stdin moves to a
private descriptor too and fd 0 reads /dev/null, so loaded code cannot swallow requests.
Descriptors made by ``os.dup`` are not inherited by child processes (ninja, nvcc).

Requests are parsed and replies written by functions bound when this module is imported, before
any task or candidate code runs: the C JSON scanner and encoder of a private decoder and encoder,
and ``os.write``. A candidate that replaces ``os.write``, ``json.loads`` or ``json.dumps`` (to
rewrite replies, or to read which calls a request will check) changes nothing here; the attempt
is reported (``tamper``, group ``protocol``). Code in the process can still reach anything with
enough effort, so the Rust side bounds what a reply may claim (docs/exploits.md).
"""

import io
import json
import json.decoder
import json.encoder
import math
import os
import sys

_write = os.write
_isfinite = math.isfinite
_type = type
_str_encode = str.encode
_str_strip = str.strip
_bytes_decode = bytes.decode
_bytes_strip = bytes.strip
_join = "".join
_len = len
# The C scanner keeps the hooks of the decoder it was made from; nothing is looked up later.
_scan = json.decoder.JSONDecoder().scan_once


def _unencodable(value):
    raise TypeError(f"a reply holds a {type(value).__name__}, which JSON cannot hold")


_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_c_ascii = getattr(json.encoder, "c_encode_basestring_ascii", None)
# markers None: replies are trees; allow_nan False: NaN and infinities raise (see ``encode``).
_encode_tree = (
    _c_encoder(None, _unencodable, _c_ascii, None, ":", ",", False, False, False)
    if _c_encoder is not None and _c_ascii is not None
    else None
)
_py_dumps = json.dumps


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
        data = _str_encode(encode(reply) + "\n", "utf-8")
        view = memoryview(data)
        # A pipe may accept less than the whole line; loop so one reply is always one line.
        while view:
            written = _write(self._reply_fd, view)
            view = view[written:]


def decode(line):
    """One request line (bytes, or text) as a JSON value; ValueError if it is not exactly one."""
    text = _str_strip(line if _type(line) is str else _bytes_decode(line, "utf-8"))
    try:
        value, end = _scan(text, 0)
    except StopIteration as stop:
        raise ValueError(f"invalid JSON at character {stop.value}") from None
    if end != _len(text):
        raise ValueError(f"extra data at character {end}")
    return value


def encode(reply: dict) -> str:
    """Compact JSON; NaN and infinities (not JSON) become null."""
    try:
        return _dumps(reply)
    except ValueError:
        return _dumps(_finite(reply))


def _dumps(value) -> str:
    if _encode_tree is None:  # an interpreter without the C accelerator
        return _py_dumps(value, separators=(",", ":"), allow_nan=False)
    return _join(_encode_tree(value, 0))


def _finite(value):
    if _type(value) is float and not _isfinite(value):
        return None
    if _type(value) is dict:
        return {k: _finite(v) for k, v in dict.items(value)}
    if _type(value) in (list, tuple):
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


def reply(rid, fields: dict) -> dict:
    """The envelope of an answer: ``{"id", "ok": true, **fields}``."""
    return {"id": rid, "ok": True, **fields}


def refusal(rid, error: dict) -> dict:
    """The envelope of an error (``error`` holds at least ``kind`` and ``message``)."""
    return {"id": rid, "ok": False, "error": error}


def serve(channel: Channel, answer) -> None:
    """Answers each request line with ``answer(line) -> (reply, stop)`` until ``stop`` or the end
    of input; blank lines are skipped. Called before any loaded code runs, it binds what it calls
    then: replacing the methods on their classes later does not change what this loop calls."""
    read, send = channel.read_line, channel.send
    while True:
        line = read()
        if line is None:
            return
        if not _bytes_strip(line):
            continue
        answer_line, stop = answer(line)
        send(answer_line)
        if stop:
            return
