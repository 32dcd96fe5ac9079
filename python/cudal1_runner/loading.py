"""Import a program file under a private module name, never through ``sys.path``."""

import importlib.util
import os
import sys
import uuid

from .errors import LOAD_ERROR, MISSING_SYMBOL, RunnerError, classify


def tidy_paths() -> None:
    """For a runner or driver started with ``-m``: the working directory, which ``-m`` puts first
    on sys.path, is taken off (loaded programs must not import from it by accident; our own
    submodules resolve through the package's ``__path__`` regardless), and build tools (ninja)
    installed beside this interpreter are put on PATH, where load_inline looks for them."""
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", cwd)]
    bindir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    if bindir and bindir not in path.split(os.pathsep):
        os.environ["PATH"] = path + os.pathsep + bindir if path else bindir


def load_module(path: str, label: str):
    """Execute the file at ``path`` as a fresh module; ``label`` names it in errors.

    The module is registered in ``sys.modules`` under a unique private name because some
    libraries (dataclasses, pickling, torch.jit) look a class's module up there.
    """
    if not isinstance(path, str) or not os.path.isabs(path):
        raise RunnerError("bad_request", f"{label} path must be absolute, got {path!r}")
    if not os.path.isfile(path):
        raise RunnerError(LOAD_ERROR, f"{label} file not found: {path}")
    name = f"_cudal1_{label}_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RunnerError(LOAD_ERROR, f"{label} cannot be imported from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # A program's own bytecode is never read again (each run has its own files): it stays out of
    # the bytecode cache that runners share (PYTHONPYCACHEPREFIX), which would only grow.
    writes = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # SystemExit from loaded code must not end the runner
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        err = classify(exc, LOAD_ERROR)
        raise RunnerError(err.kind, f"importing {label} {path}: {err.message}", err.tb, exc) from None
    finally:
        sys.dont_write_bytecode = writes
    return module


def require(module, names, label: str) -> None:
    # Only names the file itself defines; a module-level __getattr__ does not count.
    missing = [n for n in names if not callable(vars(module).get(n))]
    if missing:
        raise RunnerError(MISSING_SYMBOL, f"{label} defines no {', '.join(missing)}")
