"""Whose code is running: the runner's and its libraries', or the untrusted candidate's.

A frame belongs to trusted code when the real, resolved location of its code's file is an
existing file under a trusted root: the interpreter's installed-library directories
(``site-packages`` as ``site`` and ``sysconfig`` name them, resolved when the runner starts), the
runner package, or the reference task itself. A file name that merely contains
``site-packages``, or that names no file, is untrusted; so is code compiled from a string
(``exec``). The standard library is looked through, so ``inspect.stack()`` called by the candidate
counts as the candidate's.

A file name is also untrusted once untrusted code has made code under it that is not that file's
own (``forge``, from the audit hook: ``compile`` of other source, a ``CodeType`` built or replaced
by the candidate): a real library's name on the candidate's code buys no trust.

A few standard modules read their caller's frame for bookkeeping (``typing``,
``collections.namedtuple``, ``enum``, ``logging``, ``warnings``); frame reads made by them are not
the caller's doing.
"""

import os
import site
import sysconfig

_realpath = os.path.realpath
_isfile = os.path.isfile
_SEP = os.sep

_RUNNER_DIR = _realpath(os.path.dirname(os.path.abspath(__file__)))


def _stdlib_dirs():
    dirs = set()
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(_realpath(path) + _SEP)
            dirs.add(os.path.abspath(path) + _SEP)
    return tuple(sorted(dirs))


def _library_roots():
    """The installed-library directories of this interpreter, resolved."""
    roots = set()
    candidates = []
    try:
        candidates += site.getsitepackages()
    except Exception:  # some embedded interpreters have no site-packages list
        pass
    paths = sysconfig.get_paths()
    candidates += [paths.get("purelib"), paths.get("platlib")]
    for path in candidates:
        if path and os.path.isdir(path):
            roots.add(_realpath(path).rstrip(_SEP) + _SEP)
    return tuple(sorted(roots))


_STDLIB = _stdlib_dirs()
_LIBRARIES = _library_roots()
_BOOKKEEPING = tuple(
    _SEP + name
    for name in ("typing.py", os.path.join("collections", "__init__.py"), "enum.py", os.path.join("logging", "__init__.py"), "warnings.py")
)


def _under(path: str, roots) -> bool:
    return any(path.startswith(root) for root in roots)


class Origins:
    """Classifies frames; ``trusted_files`` are extra files that count as trusted (the task)."""

    def __init__(self, trusted_files=()) -> None:
        self._trusted = {_realpath(f) for f in trusted_files}
        self._forged = set()
        self._cache = {}

    def trust(self, path: str) -> None:
        self._trusted.add(_realpath(path))
        self._cache.clear()

    def forge(self, filename: str) -> None:
        """Untrusted code made code under this file name: it no longer vouches for anything."""
        self._forged.add(filename)
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
        if filename in self._forged:
            return "untrusted"
        try:
            path = _realpath(filename)
            exists = _isfile(path)
        except Exception:
            return "untrusted"
        if not exists:
            return "untrusted"
        if path in self._trusted or path.startswith(_RUNNER_DIR + _SEP):
            return "library"
        if _under(path, _LIBRARIES):
            return "library"
        if _under(path, _STDLIB):
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

    def first_outside_stdlib(self, frame):
        """The first frame from ``frame`` outwards that is not the standard library's."""
        while frame is not None and self.kind(frame.f_code.co_filename) == "stdlib":
            frame = frame.f_back
        return frame

