"""An audit hook that notices the candidate reaching into the runner's memory.

Expected outputs never exist in a candidate's process, but the runner's own state does: which
timed call will be checked, the input seeds, the session. Candidate code gets at such state
through ``gc`` (``get_objects``, ``get_referrers``) or through frames (``sys._getframe``,
``inspect.stack()``, a traceback's ``tb_frame``, tracing hooks). Python raises an audit event for
each of these, and an audit hook cannot be removed once added, so code that hides the call behind
``getattr`` or ``exec`` is still seen. Only calls made by untrusted code count (see ``origin``):
PyTorch reads frames for its own purposes.

Expected outputs live in a directory the sandbox does not let a candidate read, but looking for
them is the exploit whether or not the sandbox is there: a candidate that lists directories
around its own (its parent, the temporary directories) or opens saved tensors outside its own
directory is reported as ``file_access``. The event fires before the system call, so a listing
that the sandbox refuses is seen too. A sandboxed runner's ``/tmp`` is its own (cudal1 says so
through ``CUDAL1_PRIVATE_TMP``): using it is no such look.

Formatting a traceback (``traceback.format_exc()``, ``logging.exception``) reads the frames of
the exception's traceback, all of which lie between the handler and the raise, inside the
candidate's own call; when the standard ``traceback`` module reads them for itself (and hands
back only text), that is not frame inspection. Handing frames to the candidate
(``traceback.walk_tb``, ``inspect.trace``, ``tb.tb_frame``) still is.

Trust in library code goes by the file its code came from (``origin``), so code made by the
candidate under an installed library's file name is ``forged_origin``: compiling other source
under that name, building or replacing a code object with it, or running or installing such code
directly (``exec``, ``types.FunctionType``, assigning ``__code__``).
"""

import os
import sys
import threading
import traceback

GC_SCAN = "gc_scan"
FRAME_INSPECTION = "frame_inspection"
FILE_ACCESS = "file_access"
FORGED_ORIGIN = "forged_origin"
AUDIT_HOOK = "audit_hook"

_EVENTS = {
    "gc.get_objects": GC_SCAN,
    "gc.get_referrers": GC_SCAN,
    "gc.get_referents": GC_SCAN,
    "sys._getframe": FRAME_INSPECTION,
    "sys._current_frames": FRAME_INSPECTION,
    "sys.settrace": FRAME_INSPECTION,
    "sys.setprofile": FRAME_INSPECTION,
    "object.__getattr__": FRAME_INSPECTION,
    "open": FILE_ACCESS,
    "os.listdir": FILE_ACCESS,
    "os.scandir": FILE_ACCESS,
    "glob.glob": FILE_ACCESS,
    "compile": FORGED_ORIGIN,
    "code.__new__": FORGED_ORIGIN,
    "exec": FORGED_ORIGIN,
    "function.__new__": FORGED_ORIGIN,
    "object.__setattr__": FORGED_ORIGIN,
    # An audit hook of its own sees every audited step of the runner's, the input path's
    # included (and cannot be removed).
    "sys.addaudithook": AUDIT_HOOK,
}
_TENSOR_FILES = (".pt", ".pth", ".npy", ".npz", ".safetensors", ".bin", ".pkl")
_SHARED_TEMP = ("/tmp", "/var/tmp", "/dev/shm")
# ``object.__getattr__`` is raised for many attributes; only these hand out frames.
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
_TRACEBACK_PY = os.path.realpath(traceback.__file__)
_CodeType = type(compile("", "<audit>", "exec"))


def _writes(event: str, args) -> bool:
    """An ``open`` for writing (its mode, or flags other than read-only)."""
    if event != "open" or len(args) < 3:
        return False
    mode, flags = args[1], args[2]
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND) != 0


def _code_roots() -> tuple:
    """Where importable code lives: the interpreter's trees, ``sys.path``, the extension cache and
    the bytecode cache.

    Read at each check, since ``sys.path`` may grow; the candidate's working directory is not on it.
    """
    # sys.pycache_prefix: the runners' shared bytecode cache, read by every import.
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.environ.get("TORCH_EXTENSIONS_DIR", ""), sys.pycache_prefix or ""}
    roots.update(p for p in sys.path if p)
    out = []
    for root in roots:
        if root and os.path.isabs(root):
            real = os.path.realpath(root).rstrip(os.sep)
            if real and real not in _SHARED_TEMP and real != os.sep:
                out.append(real)
    return tuple(out)


class Auditor:
    def __init__(self, origins, home: str = None) -> None:
        self._origins = origins
        # The candidate's own directory (the runner's working directory) is its to use.
        self._home = os.path.realpath(home or os.getcwd())
        # A sandboxed runner with a /tmp of its own (set by cudal1, ``PRIVATE_TMP_VAR``): nothing of
        # another process is there (what it keeps of the host's /tmp are its own directories, and
        # looking around its own directory still counts), so it may use /tmp as any program does.
        private = os.environ.get("CUDAL1_PRIVATE_TMP") == "1"
        self._shared_temp = tuple(t for t in _SHARED_TEMP if not (private and t == "/tmp"))
        self._local = threading.local()
        self._seen = set()
        self._pending = []

    def install(self) -> None:
        sys.addaudithook(self._hook)

    def drain(self) -> list:
        """Findings since the last drain."""
        found, self._pending = self._pending, []
        return found

    def _hook(self, event, args) -> None:
        kind = _EVENTS.get(event)
        if kind is None:
            return
        if event == "object.__getattr__" and (len(args) < 2 or args[1] not in _FRAME_ATTRS):
            return
        if event == "object.__setattr__" and (len(args) < 3 or args[1] != "__code__"):
            return
        if kind == FILE_ACCESS and not self._suspicious_path(event, args):
            return
        if kind == FORGED_ORIGIN and not self._claims_trusted_file(event, args):
            return
        local = self._local
        if getattr(local, "busy", False):
            return  # our own sys._getframe below
        local.busy = True
        try:
            frame = sys._getframe(1)
            if kind == FORGED_ORIGIN:
                self._forged(event, args, frame)
            elif event == "object.__getattr__" and self._traceback_formats(frame):
                pass
            elif self._origins.caller_is_untrusted(frame):
                self._record(kind, event, frame)
        except Exception:  # an audit hook must never raise into the audited code
            pass
        finally:
            local.busy = False

    @staticmethod
    def _code_filename(event: str, args):
        if event == "compile":
            return args[1] if len(args) > 1 else None
        if event == "code.__new__":
            return args[1] if len(args) > 1 else None
        code = args[2] if event == "object.__setattr__" else (args[0] if args else None)
        return code.co_filename if type(code) is _CodeType else None

    def _claims_trusted_file(self, event: str, args) -> bool:
        try:
            filename = self._code_filename(event, args)
            if type(filename) is bytes:
                filename = os.fsdecode(filename)
            return type(filename) is str and self._origins.kind(filename) != "untrusted"
        except Exception:
            return False

    def _forged(self, event: str, args, frame) -> None:
        """Code under a trusted file's name, made or run by untrusted code itself."""
        if event == "compile":
            # Imports compile library source too, called from the import system: only other
            # source than the file holds is a forgery.
            if not self._origins.caller_is_untrusted(frame) or self._is_file_source(args):
                return
        elif self._origins.kind(frame.f_code.co_filename) != "untrusted":
            return  # made by a library (torch.compile rewrites code) or run by the import system
        filename = self._code_filename(event, args)
        if type(filename) is bytes:
            filename = os.fsdecode(filename)
        self._origins.forge(filename)
        self._record(FORGED_ORIGIN, event, frame)

    @staticmethod
    def _is_file_source(args) -> bool:
        source, filename = args[0], args[1]
        try:
            with open(filename, "rb") as f:
                data = f.read()
        except Exception:
            return False
        if type(source) is str:
            try:
                return source == data.decode("utf-8")
            except UnicodeDecodeError:
                return False
        return type(source) is bytes and source == data

    @staticmethod
    def _traceback_formats(frame) -> bool:
        """The ``traceback`` module reads a traceback's frames for its own use (to render text):
        both the reader and its consumer are that module's functions."""
        outer = frame.f_back
        return (
            os.path.realpath(frame.f_code.co_filename) == _TRACEBACK_PY
            and outer is not None
            and os.path.realpath(outer.f_code.co_filename) == _TRACEBACK_PY
        )

    def _suspicious_path(self, event: str, args) -> bool:
        try:
            target = args[0] if args else "."
            if isinstance(target, int):
                return False  # an already open descriptor
            if event == "glob.glob":
                target = os.path.dirname(str(target)) or "."
            path = os.path.realpath(os.fsdecode(target) if target is not None else ".")
        except Exception:
            return False
        home = self._home
        if path == home or path.startswith(home + os.sep):
            return False
        prefix = os.path.realpath(sys.pycache_prefix) if sys.pycache_prefix else None
        if prefix and (path == prefix or path.startswith(prefix + os.sep)) and _writes(event, args):
            return True  # bytecode written there would run in the trusted reference

        if any(path == root or path.startswith(root + os.sep) for root in _code_roots()):
            return False  # importing code (a venv or the extension cache may well sit under /tmp)
        if home.startswith(path.rstrip(os.sep) + os.sep) or path == os.path.dirname(home):
            return True  # an ancestor of its own directory: the work root holds the reference's
        parent = os.path.dirname(home)
        if path.startswith(parent + os.sep) or any(path == t or path.startswith(t + os.sep) for t in self._shared_temp):
            return True
        return event == "open" and path.endswith(_TENSOR_FILES)

    def _record(self, kind: str, event: str, frame) -> None:
        key = (kind, event)
        if key in self._seen:
            return
        self._seen.add(key)
        while frame is not None and self._origins.kind(frame.f_code.co_filename) == "stdlib":
            frame = frame.f_back
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"
        what = {
            GC_SCAN: "scanned the garbage collector's objects",
            FRAME_INSPECTION: "inspected interpreter frames",
            FILE_ACCESS: "looked for files outside its own directory",
            FORGED_ORIGIN: "made code under an installed file's name",
            AUDIT_HOOK: "added an audit hook, which sees the runner's own audited steps",
        }[kind]
        self._pending.append({"kind": kind, "detail": f"candidate code {what} ({event} at {where})"})
