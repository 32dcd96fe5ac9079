"""CPU time a process spends while it should be waiting for its next request.

Between two requests a candidate runner has nothing to do: the Rust side is timing the
reference, comparing, or starting the next block. A candidate that keeps a thread (Python or
native) burning CPU there competes with the reference for the cores and makes it look slow. The
process's CPU clock counts every thread, so the time it advances between requests is measured.
A little is normal (OpenMP workers spin briefly after a parallel region), so only a total above
both ``floor_s`` and ``share`` of the idle wall time is reported.
"""

import time

BUSY_WHILE_IDLE = "busy_while_idle"

# Bound at import, before any task or candidate code runs.
_cpu = time.process_time
_wall = time.perf_counter


class IdleMeter:
    def __init__(self, floor_s: float = 0.1, share: float = 0.25) -> None:
        self._floor = floor_s
        self._share = share
        self._since = None
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self._reported = False

    def request_started(self) -> None:
        if self._since is not None:
            cpu, wall = self._since
            self.cpu_s += _cpu() - cpu
            self.wall_s += _wall() - wall
            self._since = None

    def request_done(self) -> None:
        self._since = (_cpu(), _wall())

    def findings(self) -> list:
        if self._reported or self.cpu_s <= max(self._floor, self._share * self.wall_s):
            return []
        self._reported = True
        return [{
            "kind": BUSY_WHILE_IDLE,
            "detail": f"the candidate's process used {self.cpu_s * 1e3:.0f} ms of CPU in {self.wall_s * 1e3:.0f} ms between requests, while the reference was being timed",
        }]
