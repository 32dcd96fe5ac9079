"""Threads that candidate code starts and leaves running after a call returns.

Work done in a background thread escapes the timer, and a thread that keeps running between
requests can slow the reference down while it is being timed. Every thread start goes through
``_thread.start_new_thread`` (``start_joinable_thread`` from Python 3.13; ``threading`` included);
the runner wraps them before candidate code is imported and tracks the threads that untrusted
code started. A thread the candidate joins
before returning is fine; one still alive after the call is reported. The wrappers are checked
by ``tamper`` so that restoring the originals is itself seen.
"""

import _thread
import sys
import threading

BACKGROUND_THREAD = "background_thread"
# The functions of ``_thread`` that start a thread, by Python version.
STARTERS = ("start_new_thread", "start_joinable_thread")


class ThreadWatch:
    def __init__(self, origins) -> None:
        self._origins = origins
        self._lock = threading.Lock()
        self._alive = {}  # ident -> where it was started

    def install(self) -> None:
        for name in STARTERS:
            original = getattr(_thread, name, None)
            if original is None:
                continue
            wrapper = self._wrap(original)
            setattr(_thread, name, wrapper)
            # threading keeps its own references, taken at its import.
            for alias in (f"_{name}", "_start_new_thread" if name == "start_new_thread" else None):
                if alias and hasattr(threading, alias):
                    setattr(threading, alias, wrapper)
        if hasattr(_thread, "start_new"):
            _thread.start_new = _thread.start_new_thread

    def _wrap(self, original):
        watch = self

        def start(function, *args, **kwargs):
            where = watch._untrusted_caller()
            if where is None:
                return original(function, *args, **kwargs)

            def run(*a, **k):
                ident = _thread.get_ident()
                with watch._lock:
                    watch._alive[ident] = where
                try:
                    return function(*a, **k)
                finally:
                    with watch._lock:
                        watch._alive.pop(ident, None)

            return original(run, *args, **kwargs)

        return start

    def _untrusted_caller(self):
        try:
            frame = sys._getframe(2)
        except ValueError:
            return None
        # The first frame outside the standard library decides: a pool that PyTorch starts
        # during the candidate's call is PyTorch's, one the candidate's own code starts is not.
        if not self._origins.caller_is_untrusted(frame):
            return None
        while frame is not None and self._origins.kind(frame.f_code.co_filename) != "untrusted":
            frame = frame.f_back
        return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"

    def findings(self) -> list:
        """One finding while any thread started by untrusted code is still running."""
        with self._lock:
            alive = sorted(set(self._alive.values()))
        if not alive:
            return []
        return [{
            "kind": BACKGROUND_THREAD,
            "detail": f"{len(alive)} thread(s) started by the candidate were still running after the call returned (started at {', '.join(alive)})",
        }]
