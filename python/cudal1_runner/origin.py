"""Whose code is running: the runner's and its libraries', or the untrusted candidate's.

A frame belongs to trusted code when its file lies in an installed library (``site-packages``,
``dist-packages``), in the runner package, or is the reference task; the standard library is
looked through, so ``inspect.stack()`` called by the candidate counts as the candidate's. Code
compiled from a string (``exec``) has no real file and is untrusted. A few standard modules read
their caller's frame for bookkeeping (``typing``, ``collections.namedtuple``, ``enum``,
``logging``, ``warnings``); frame reads made by them are not the caller's doing.
"""

import os
import sysconfig

_RUNNER_DIR = os.path.dirname(os.path.abspath(__file__))


def _stdlib_dirs():
    dirs = set()
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(os.path.realpath(path) + os.sep)
            dirs.add(os.path.abspath(path) + os.sep)
    return tuple(sorted(dirs))


_STDLIB = _stdlib_dirs()
_LIBRARY_MARKERS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_BOOKKEEPING = tuple(
    os.sep + name
    for name in ("typing.py", os.path.join("collections", "__init__.py"), "enum.py", os.path.join("logging", "__init__.py"), "warnings.py")
)


class Origins:
    """Classifies frames; ``trusted_files`` are extra files that count as trusted (the task)."""

    def __init__(self, trusted_files=()) -> None:
        self._trusted = {os.path.abspath(f) for f in trusted_files}
        self._cache = {}

    def trust(self, path: str) -> None:
        self._trusted.add(os.path.abspath(path))
        self._cache.clear()

    def kind(self, filename: str) -> str:
        """``library``, ``stdlib`` or ``untrusted`` for a code object's file name."""
        found = self._cache.get(filename)
        if found is None:
            found = self._classify(filename)
            self._cache[filename] = found
        return found

    def _classify(self, filename: str) -> str:
        if not filename or filename.startswith("<"):
            # Frozen importlib and the like are the interpreter's; exec'd strings are not.
            return "stdlib" if filename.startswith("<frozen ") else "untrusted"
        path = os.path.abspath(filename)
        if path in self._trusted or path.startswith(_RUNNER_DIR + os.sep):
            return "library"
        if any(marker in path for marker in _LIBRARY_MARKERS):
            return "library"
        if path.startswith(_STDLIB):
            return "stdlib"
        return "untrusted"

    def caller_is_untrusted(self, frame) -> bool:
        """Whether the first non-standard-library frame from ``frame`` outwards is untrusted.

        Returns False when a bookkeeping module of the standard library is the direct reader.
        """
        first = True
        while frame is not None:
            name = frame.f_code.co_filename
            kind = self.kind(name)
            if kind == "stdlib":
                if first and name.endswith(_BOOKKEEPING):
                    return False
                first = False
                frame = frame.f_back
                continue
            return kind == "untrusted"
        return False
