"""The compile role: make a candidate's extension builds happen on a CPU, ahead of device time.

Wherever the program builds (at import, in ``__init__``, on its first call, in a helper), the build
should be done here, so that the candidate's process finds it built and a device never waits for
nvcc. The role imports the program, constructs ``ModelNew`` on the CPU, and then lets
``extensions.discover`` find the builds that did not happen yet: it calls the methods that hold
them, makes one call of the model on small CPU inputs, and works out the remaining calls'
arguments from the source. Builds still missing in a program that asks ``torch.cuda.is_available()``
get one more try with that question answered True. The reply says how many build sites the program has and which were
missed, so that the Rust side can give those candidates the time a build takes. Everything is
built into ``TORCH_EXTENSIONS_DIR``, a fresh directory the Rust side publishes whole once this
role returns; the builds made are recorded there (``extensions.save_builds``) for the
candidate's process to load.

fds 1 and 2 point at a temporary file while the candidate runs, so the output of ninja, the host
compiler and nvcc is captured for the reply. Only a failed build at import or construction is a
``compile_error``; any other exception (a CUDA call at import with no GPU, a missing optional
package) comes after or apart from the build and is reported as success with the exception text
in ``log``.
"""

import contextlib
import os
import signal
import sys
import tempfile
import time
import traceback

import torch

from . import extensions
from .errors import COMPILE_ERROR, LOAD_ERROR, RunnerError, chain, classify, tail
from .inputs import InputSource
from .loading import load_module
from .seeding import seed_all

# One call of the model on the CPU, to reach builds made on the first call: only for inputs this
# small, and for at most this long.
_FORWARD_MAX_BYTES = 256 << 20
_FORWARD_SECONDS = 30

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
    found = {"sites": 0, "missed": []}
    extensions.install(build=True)
    with _captured_fds() as sink:
        try:
            module = load_module(candidate, "candidate")
        except RunnerError as err:
            module = None
            failure = err
        instance, source = None, None
        if module is not None and reference is not None:
            failure, instance, source = _construct(module, reference, notes)
        if module is not None and (failure is None or failure.kind != COMPILE_ERROR):
            forward = (lambda: _forward(instance, source, notes)) if instance is not None and source is not None else None
            found = extensions.discover(module, candidate, instance, forward, notes)
            if found["missed"] and reference is not None and _asks_for_a_gpu(candidate):
                found = _as_if_on_a_gpu(candidate, reference, notes) or found
    log = _read(sink)
    sink.close()
    extensions.save_failures()
    extensions.save_builds()

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
        "sites": found["sites"],
        "missed": found["missed"],
    }


def _asks_for_a_gpu(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            return "is_available" in f.read()
    except OSError:
        return False


def _as_if_on_a_gpu(candidate: str, reference: str, notes: list):
    """Builds behind ``if torch.cuda.is_available():`` (in ``__init__``, often through helpers
    whose sources are made by other methods) are not reached where the role hides the GPUs. The
    program is imported and constructed once more with ``is_available()`` answering True, and the
    builds still missing are looked for again; no call of the model is made (it would take the
    GPU path with CPU tensors). Everything that fails here is a note, a failed build too: the
    candidate's own process makes the same build on the GPU path and is judged by it (the
    failure is recorded, so it fails there at once). Returns ``discover``'s result, or None when
    the program could not even be imported this way."""
    import torch.cuda

    saved = torch.cuda.is_available
    torch.cuda.is_available = lambda: True
    try:
        try:
            module = load_module(candidate, "candidate")
        except RunnerError as err:
            notes.append(f"importing it again as if on a GPU failed: {err.message}")
            return None
        failure, instance, _ = _construct(module, reference, notes)
        if failure is not None:
            notes.append(f"constructing ModelNew as if on a GPU: {failure.message}")
        return extensions.discover(module, candidate, instance, None, notes)
    finally:
        torch.cuda.is_available = saved


class _TooLong(Exception):
    pass


def _forward(model, source, notes: list) -> None:
    """One call of the model on small CPU inputs, for builds made on the first call."""
    try:
        with torch.device("meta"):
            seed_all(0)
            probe = source.get_inputs()
        size = sum(int(v.numel()) * v.element_size() for v in probe if isinstance(v, torch.Tensor))
    except Exception as exc:
        notes.append(f"sizing the inputs on meta tensors failed: {type(exc).__name__}: {exc}")
        return
    if size > _FORWARD_MAX_BYTES:
        notes.append(f"not calling the model on the CPU: its inputs take {size >> 20} MB")
        return

    def too_long(signum, frame):
        if extensions.building():
            signal.setitimer(signal.ITIMER_REAL, 1)  # let the build finish; stop right after
            return
        raise _TooLong()

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.setitimer(signal.ITIMER_REAL, _FORWARD_SECONDS)
    try:
        seed_all(0)
        inputs = source.get_inputs()
        with torch.no_grad():
            model(*inputs)
    except _TooLong:
        notes.append(f"one call of the model on the CPU took over {_FORWARD_SECONDS} s; stopped it")
    except Exception as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        notes.append(f"calling ModelNew on the CPU failed (not a build error): {text}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _unloadable_library(exc) -> bool:
    """A library that built but cannot load for missing symbols is a build failure too."""
    return any(isinstance(e, ImportError) and "undefined symbol" in str(e) for e in chain(exc))


def _construct(module, reference: str, notes: list):
    """Build ModelNew once, for candidates that call ``load_inline`` in ``__init__``.

    Returns (a RunnerError only for a failed build, the model or None, the reference's input
    source or None); other failures become notes.
    """
    cls = vars(module).get("ModelNew")
    if not callable(cls):
        notes.append("candidate defines no ModelNew; nothing constructed")
        return None, None, None
    source = None
    try:
        ref = load_module(reference, "reference")
        source = InputSource(ref)
        with torch.no_grad():
            seed_all(0)
            init = source.get_init_inputs()
            seed_all(0)
            return None, cls(*init), source
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        err = classify(exc, LOAD_ERROR)
        if err.kind == COMPILE_ERROR:
            return err, None, source
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        notes.append(f"constructing ModelNew on the CPU failed (not a build error): {text}")
        partial = _partly_constructed(exc, cls)
        if partial is not None:
            notes.append("its methods are searched for builds on the instance as far as __init__ got")
        return None, partial, source
    return None, None, source


def _partly_constructed(exc: BaseException, cls):
    """The instance whose ``__init__`` raised, as far as it got (``self.x = ...`` done before a
    ``.cuda()`` that fails where no GPU is visible): the methods that hold builds often need only
    those attributes. Found in the frames of the traceback."""
    code = getattr(getattr(cls, "__init__", None), "__code__", None)
    found = None
    tb = exc.__traceback__
    while tb is not None:
        if code is not None and tb.tb_frame.f_code is code:
            found = tb.tb_frame.f_locals.get("self")
        tb = tb.tb_next
    return found if isinstance(found, cls) else None


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
