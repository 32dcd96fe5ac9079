"""One request in, one reply out. Knows the protocol, not the model."""

import json
import platform
import traceback

from . import PROTOCOL

ROLES = ("system", "user", "assistant")


class BadRequest(Exception):
    pass


def _error(rid, kind, message):
    return {"id": rid, "ok": False, "error": {"kind": kind, "message": message}}


def _number(req, key, default, lo, hi, lo_open=False):
    value = req.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"`{key}` must be a number")
    value = float(value)
    if not (value > lo if lo_open else value >= lo) or value > hi:
        raise BadRequest(f"`{key}` = {value} is out of range")
    return value


def parse_generate(req):
    """The arguments of ``backend.generate`` from a request, or BadRequest saying what is wrong."""
    messages = req.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("`messages` must be a non-empty list")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise BadRequest(f"message {i} must be {{\"role\": system|user|assistant, \"content\": str}}")
        clean.append({"role": m["role"], "content": m["content"]})
    max_tokens = req.get("max_tokens", 256)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest("`max_tokens` must be a positive integer")
    seed = req.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise BadRequest("`seed` must be a non-negative integer or null")
    return {
        "messages": clean,
        "max_tokens": max_tokens,
        "temperature": _number(req, "temperature", 1.0, 0.0, 100.0),
        "top_p": _number(req, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        # torch.manual_seed takes 64-bit seeds; fold larger ones in rather than fail.
        "seed": None if seed is None else seed % (1 << 63),
    }


class Session:
    def __init__(self, backend, load_error=None):
        self.backend = backend
        self.load_error = load_error

    def serve(self, line):
        """(reply, stop) for one request line."""
        try:
            req = json.loads(line)
        except ValueError as exc:
            return _error(None, "bad_request", f"not JSON: {exc}"), False
        if not isinstance(req, dict):
            return _error(None, "bad_request", "a request must be a JSON object"), False
        rid = req.get("id")
        op = req.get("op")
        if op == "shutdown":
            return {"id": rid, "ok": True}, True
        if op not in ("hello", "generate"):
            return _error(rid, "bad_request", f"unknown op {op!r}"), False
        if self.backend is None:
            return _error(rid, "load_error", self.load_error or "no model loaded"), False
        if op == "hello":
            return {"id": rid, "ok": True, "protocol": PROTOCOL, "python": platform.python_version(),
                    **self.backend.describe()}, False
        try:
            args = parse_generate(req)
        except BadRequest as exc:
            return _error(rid, "bad_request", str(exc)), False
        try:
            out = self.backend.generate(**args)
        except MemoryError as exc:
            return _error(rid, "oom", f"out of memory: {exc}"), False
        except Exception as exc:
            kind = "oom" if "out of memory" in str(exc).lower() else "runtime_error"
            message = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
            return _error(rid, kind, message), False
        return {"id": rid, "ok": True, **out}, False
