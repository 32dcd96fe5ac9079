"""An audit hook that notices the candidate reaching into the runner's memory.

Expected outputs never exist in a candidate's process, but the runner's own state does: which
timed call will be checked, the input seeds, the session. Candidate code gets at such state
through ``gc`` (``get_objects``, ``get_referrers``) or through frames (``sys._getframe``,
``inspect.stack()``, a traceback's ``tb_frame``, tracing hooks). Python raises an audit event for
each of these, and an audit hook cannot be removed once added, so code that hides the call behind
``getattr`` or ``exec`` is still seen. Only calls made by untrusted code count (see ``origin``):
PyTorch reads frames for its own purposes.
"""

import sys
import threading

GC_SCAN = "gc_scan"
FRAME_INSPECTION = "frame_inspection"

_EVENTS = {
    "gc.get_objects": GC_SCAN,
    "gc.get_referrers": GC_SCAN,
    "gc.get_referents": GC_SCAN,
    "sys._getframe": FRAME_INSPECTION,
    "sys._current_frames": FRAME_INSPECTION,
    "sys.settrace": FRAME_INSPECTION,
    "sys.setprofile": FRAME_INSPECTION,
    "object.__getattr__": FRAME_INSPECTION,
}
# ``object.__getattr__`` is raised for many attributes; only these hand out frames.
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})


class Auditor:
    def __init__(self, origins) -> None:
        self._origins = origins
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
        local = self._local
        if getattr(local, "busy", False):
            return  # our own sys._getframe below
        local.busy = True
        try:
            frame = sys._getframe(1)
            if self._origins.caller_is_untrusted(frame):
                self._record(kind, event, frame)
        except Exception:  # an audit hook must never raise into the audited code
            pass
        finally:
            local.busy = False

    def _record(self, kind: str, event: str, frame) -> None:
        key = (kind, event)
        if key in self._seen:
            return
        self._seen.add(key)
        while frame is not None and self._origins.kind(frame.f_code.co_filename) == "stdlib":
            frame = frame.f_back
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"
        what = "scanned the garbage collector's objects" if kind == GC_SCAN else "inspected interpreter frames"
        self._pending.append({"kind": kind, "detail": f"candidate code {what} ({event} at {where})"})
