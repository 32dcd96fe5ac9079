"""The timed thread's CPU core.

On a GPU the clock stops after a device-wide synchronisation and an event record, and how long
those take depends on the core the thread runs on: on a virtual machine, by up to 15% of a ~30 us
call between two of its cores. cudal1 therefore names one core for both sides of a pair, and the
main thread runs every timed call of a block on it. The functions are bound at import, before
candidate code runs; a thread found elsewhere after a call is put back and, in the candidate role,
reported.
"""

import os

AFFINITY_CHANGED = "affinity_changed"

_get = os.sched_getaffinity
_set = os.sched_setaffinity


class Pin:
    """Pins the calling thread to ``cpu`` inside ``with``; ``cpu=None`` does nothing."""

    def __init__(self, cpu) -> None:
        self.cpu = cpu
        self.active = False
        self.moved = False
        self._before = None

    def __enter__(self):
        if self.cpu is not None:
            self._before = _get(0)
            try:
                _set(0, {self.cpu})
                self.active = True
            except OSError:
                # A core this process may not use (another cpuset): time unpinned rather than fail.
                self.active = False
        return self

    def keep(self) -> None:
        """After a call: back to the core if the call moved the thread."""
        if self.active and _get(0) != {self.cpu}:
            self.moved = True
            _set(0, {self.cpu})

    def __exit__(self, *exc) -> None:
        if self.active:
            _set(0, self._before)

    def findings(self) -> list:
        if not self.moved:
            return []
        return [{"kind": AFFINITY_CHANGED, "detail": f"the timed thread left CPU core {self.cpu} during a call"}]
