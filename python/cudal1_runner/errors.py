"""Error kinds of the protocol and the classification of exceptions into them."""

import subprocess
import traceback

BAD_REQUEST = "bad_request"
LOAD_ERROR = "load_error"
MISSING_SYMBOL = "missing_symbol"
COMPILE_ERROR = "compile_error"
RUNTIME_ERROR = "runtime_error"
CUDA_ERROR = "cuda_error"
OOM = "oom"
BAD_INPUTS = "bad_inputs"
INTERNAL = "internal"

# Compiler logs and tracebacks can be long; the Rust side keeps the tail, which holds the error.
MAX_TEXT = 20000

_CUDA_MARKERS = (
    "CUDA error",
    "illegal memory access",
    "device-side assert",
    "launch failure",
    "CUBLAS_STATUS",
    "CUDNN_STATUS",
)


class RunnerError(Exception):
    """An error that becomes an ``ok: false`` reply of a given kind."""

    def __init__(self, kind: str, message: str, tb: str = "", cause: BaseException = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.tb = tb
        # The exception this error was classified from, when there was one.
        self.cause = cause

    def to_reply(self) -> dict:
        return {"kind": self.kind, "message": tail(self.message), "traceback": tail(self.tb)}


def tail(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[-limit:]


def chain(exc: BaseException):
    """The exception and its causes/contexts, without looping on cycles."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_build_failure(exc: BaseException) -> bool:
    for e in chain(exc):
        if isinstance(e, subprocess.CalledProcessError):
            return True
        if isinstance(e, RuntimeError) and "Error building extension" in str(e):
            return True
    return False


def build_log(exc: BaseException) -> str:
    """The compiler output carried by a failed build, as torch reports it."""
    parts = []
    for e in chain(exc):
        if isinstance(e, subprocess.CalledProcessError):
            for stream in (e.output, e.stderr):
                if stream:
                    parts.append(stream.decode("utf-8", "replace") if isinstance(stream, bytes) else str(stream))
        else:
            parts.append(str(e))
    return "\n".join(parts)


def is_oom(exc: BaseException) -> bool:
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
    except Exception:  # torch missing or odd builds: fall back to the message
        pass
    return isinstance(exc, MemoryError) or "out of memory" in str(exc)


def _is_cuda_fault(exc: BaseException) -> bool:
    if type(exc).__name__ == "AcceleratorError":
        return True
    text = str(exc)
    return any(marker in text for marker in _CUDA_MARKERS)


def classify(exc: BaseException, default: str) -> RunnerError:
    """Turn any exception into a RunnerError; ``default`` is the kind for the rest."""
    if isinstance(exc, RunnerError):
        return exc
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    message = f"{type(exc).__name__}: {exc}"
    if is_build_failure(exc):
        return RunnerError(COMPILE_ERROR, build_log(exc), tb, exc)
    for e in chain(exc):
        if is_oom(e):
            return RunnerError(OOM, message, tb, exc)
    for e in chain(exc):
        if _is_cuda_fault(e):
            return RunnerError(CUDA_ERROR, message, tb, exc)
    return RunnerError(default, message, tb, exc)


def with_context(err: RunnerError, prefix: str) -> RunnerError:
    """The same error with ``prefix: `` in front of its message (e.g. the seed)."""
    return RunnerError(err.kind, f"{prefix}: {err.message}", err.tb, err.cause)
