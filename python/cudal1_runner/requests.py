"""Typed access to request fields; anything malformed is a ``bad_request``."""

import os

from .errors import BAD_REQUEST, RunnerError

_MISSING = object()


def field(request: dict, name: str, kinds, default=_MISSING):
    if name not in request:
        if default is _MISSING:
            raise RunnerError(BAD_REQUEST, f"missing field `{name}`")
        return default
    value = request[name]
    # JSON booleans are Python bools, which are also ints: keep them apart.
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in _as_tuple(kinds))
    if not ok:
        raise RunnerError(BAD_REQUEST, f"field `{name}` has the wrong type ({type(value).__name__})")
    return value


def _as_tuple(kinds):
    return kinds if isinstance(kinds, tuple) else (kinds,)


def seed(value, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or value >= 2**63:
        raise RunnerError(BAD_REQUEST, f"`{name}` must be an integer in [0, 2^63), got {value!r}")
    return value


def seeds(request: dict) -> list:
    values = field(request, "seeds", list)
    return [seed(v, "seeds") for v in values]


def abs_path(request: dict, name: str, default=_MISSING):
    value = field(request, name, (str, type(None)), default)
    if value is not None and not os.path.isabs(value):
        raise RunnerError(BAD_REQUEST, f"`{name}` must be an absolute path, got {value!r}")
    return value


def number(request: dict, name: str) -> float:
    value = field(request, name, (int, float))
    if value < 0:
        raise RunnerError(BAD_REQUEST, f"`{name}` must not be negative")
    return float(value)
