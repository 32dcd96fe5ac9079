"""One wire for every Python child: the runner and the model worker read requests and write
replies with the same module (one file, ``cudal1_runner/wire.py``), and its serve loop skips
blank lines, stops where the answer says so and at the end of input."""

import math
import os

from cudal1_runner import wire


def _pipe_with(data: bytes) -> int:
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    return r


def _served(data: bytes, answer):
    reply_r, reply_w = os.pipe()
    channel = wire.Channel(_pipe_with(data), reply_w)
    wire.serve(channel, answer)
    os.close(reply_w)
    out = b""
    while chunk := os.read(reply_r, 1 << 16):
        out += chunk
    os.close(reply_r)
    return [wire.decode(line) for line in out.splitlines()]


def test_the_model_worker_speaks_the_runners_wire():
    import cudal1_model.wire

    assert os.path.realpath(cudal1_model.wire.__file__) == os.path.realpath(wire.__file__)


def test_the_loop_skips_blank_lines_and_stops_when_told_or_at_the_end():
    seen = []

    def answer(line):
        request = wire.decode(line)
        seen.append(request["id"])
        return wire.reply(request["id"], {"echo": request.get("x")}), request.get("stop", False)

    replies = _served(b'{"id": 1, "x": 5}\n\n   \n{"id": 2, "stop": true}\n{"id": 3}\n', answer)
    assert seen == [1, 2], "nothing is read after a stop"
    assert replies == [{"id": 1, "ok": True, "echo": 5}, {"id": 2, "ok": True, "echo": None}]
    assert _served(b'{"id": 7}\n', answer) == [{"id": 7, "ok": True, "echo": None}], "end of input"


def test_refusals_share_the_envelope_and_non_finite_numbers_become_null():
    assert wire.refusal(4, {"kind": "oom", "message": "m"}) == {"id": 4, "ok": False, "error": {"kind": "oom", "message": "m"}}
    line = wire.encode(wire.reply(1, {"loss": math.nan, "items": [math.inf, 1.5]}))
    assert wire.decode(line) == {"id": 1, "ok": True, "loss": None, "items": [None, 1.5]}
    # Text lines (the model worker's tests) and bytes (the channel) decode alike.
    assert wire.decode('{"a": 1}') == wire.decode(b'{"a": 1}\n') == {"a": 1}
