"""The compile role: import a candidate on a CPU machine so its ``load_inline`` builds happen.

fds 1 and 2 point at a temporary file while the candidate runs, so the output of ninja, the host
compiler and nvcc is captured for the reply. Only a failed build is a ``compile_error``; any other
exception (a CUDA call at import with no GPU, a missing optional package) comes after or apart from
the build and is reported as success with the exception text in ``log``.
"""

import contextlib
import os
import sys
import tempfile
import time
import traceback

import torch

from .errors import COMPILE_ERROR, LOAD_ERROR, RunnerError, chain, classify, tail
from .inputs import InputSource
from .loading import load_module
from .seeding import seed_all

_LIB_SUFFIXES = (".so", ".pyd", ".dylib")


@contextlib.contextmanager
def _captured_fds():
    sys.stdout.flush()
    sys.stderr.flush()
    sink = tempfile.TemporaryFile()
    saved = (os.dup(1), os.dup(2))
    os.dup2(sink.fileno(), 1)
    os.dup2(sink.fileno(), 2)
    try:
        yield sink
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _read(sink) -> str:
    sink.seek(0)
    return sink.read().decode("utf-8", "replace")


def run(candidate: str, reference) -> dict:
    started = time.perf_counter_ns()
    notes = []
    failure = None
    with _captured_fds() as sink:
        try:
            module = load_module(candidate, "candidate")
        except RunnerError as err:
            module = None
            failure = err
        if module is not None and reference is not None:
            failure = _construct(module, reference, notes)
    log = _read(sink)
    sink.close()

    if failure is not None:
        if failure.kind == COMPILE_ERROR or _unloadable_library(failure.cause):
            raise RunnerError(COMPILE_ERROR, tail(log + "\n" + failure.message), failure.tb)
        if failure.cause is None or isinstance(failure.cause, SyntaxError):
            # A missing file or a syntax error: nothing was built and nothing will be.
            raise failure
        notes.append(f"after import: {failure.message}\n{failure.tb}")
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not root:
        notes.append("TORCH_EXTENSIONS_DIR is not set; built extensions are not listed")
    text = log + ("\n" if log and notes else "") + "\n".join(notes)
    return {
        "built": built_extensions(root) if root else [],
        "compile_ms": (time.perf_counter_ns() - started) / 1e6,
        "log": tail(text),
    }


def _unloadable_library(exc) -> bool:
    """A library that built but cannot load for missing symbols is a build failure too."""
    return any(isinstance(e, ImportError) and "undefined symbol" in str(e) for e in chain(exc))


def _construct(module, reference: str, notes: list):
    """Build ModelNew once, for candidates that call ``load_inline`` in ``__init__``.

    Returns a RunnerError only for a failed build; other failures become notes.
    """
    cls = vars(module).get("ModelNew")
    if not callable(cls):
        notes.append("candidate defines no ModelNew; nothing constructed")
        return None
    try:
        ref = load_module(reference, "reference")
        source = InputSource(ref)
        with torch.no_grad():
            seed_all(0)
            init = source.get_init_inputs()
            seed_all(0)
            cls(*init)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        err = classify(exc, LOAD_ERROR)
        if err.kind == COMPILE_ERROR:
            return err
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        notes.append(f"constructing ModelNew on the CPU failed (not a build error): {text}")
    return None


def built_extensions(root: str) -> list:
    """Extension folders under TORCH_EXTENSIONS_DIR that hold a built library."""
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return []
    built = []
    for name in entries:
        folder = os.path.join(root, name)
        try:
            files = os.listdir(folder) if os.path.isdir(folder) else []
        except OSError:
            continue
        if any(f.endswith(_LIB_SUFFIXES) for f in files):
            built.append(name)
    return built
