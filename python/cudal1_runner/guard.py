"""The candidate role's watch over untrusted code, as findings after every call.

``Guard`` is created when the runner starts, before any task or candidate code runs, and holds:
the audit hook (``gc`` scans, frame reads), the thread-start wrappers, the baseline of functions
that timing and checks rely on, the precision settings, the constructed model's entry points, the
reference module's globals, the CPU time used between requests, the torch function and dispatch
mode stacks (a mode left active after a call sees the runner's own torch calls) and the number of
threads PyTorch may use (more intra-op threads than the runner was given is speed bought with
cores the reference does not get). ``findings()`` returns what is new since the last call; each
finding is reported once per process.

The input path reports what it saw (``input_path_made``). The baseline is not checked again at
the start of each request: a check costs the candidate's process untimed time per block that the
reference does not spend, which cudal1's clock reads as work that escaped the timer; what runs
between requests is still seen at the next block's end (a change that persists) or by that clock.
"""

import torch

from . import precision
from .audit import Auditor
from .idle import IdleMeter
from .modelcheck import ModelSnapshot
from .origin import Origins
from .refcheck import ReferenceWatch
from .tamper import Baseline, thread_entries
from .threads import ThreadWatch

TAMPERED_TF32 = "tampered_tf32"
TAMPERED_MODE = "tampered_torch_mode"
EXTRA_THREADS = "extra_threads"

_function_modes = getattr(torch._C, "_len_torch_function_stack", lambda: 0)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)
_num_threads = torch.get_num_threads
_num_interop_threads = torch.get_num_interop_threads


class Guard:
    def __init__(self) -> None:
        self.origins = Origins()
        self.auditor = Auditor(self.origins)
        self.auditor.install()
        self.threads = ThreadWatch(self.origins)
        self.threads.install()
        self.baseline = Baseline(thread_entries(), self.origins)
        self._threads = (_num_threads(), _num_interop_threads())
        self.idle = IdleMeter()
        self._precision = None
        self._model = None
        self._reference = None
        self._pending = []
        self._reported = set()
        self._input_path = None

    def input_path_made(self, findings) -> None:
        """The input path's ``findings`` (``inputs.make_path``), drained with the guard's."""
        self._input_path = findings

    # --- load ------------------------------------------------------------------------------

    def reference_loaded(self, module, path: str) -> None:
        """Before the candidate is imported: the task's own code is trusted."""
        self.origins.trust(path)
        self._reference = ReferenceWatch(module)

    def precision_set(self) -> None:
        """The runner has just applied its precision settings; remember them."""
        self._precision = precision.state()

    def check_precision(self, when: str) -> None:
        """Before the runner puts its settings back: did the candidate's code change them?"""
        if self._precision is None:
            return
        changed = precision.changes(self._precision, precision.state())
        if changed:
            self._pending.append({"kind": TAMPERED_TF32, "detail": f"{when}: {'; '.join(changed)}"})

    def constructed(self, model) -> None:
        self._model = ModelSnapshot(model)
        self._pending.extend(self._model.construction_findings())

    # --- after calls -----------------------------------------------------------------------

    @staticmethod
    def _mode_findings() -> list:
        modes = (_function_modes(), _dispatch_modes())
        if modes == (0, 0):
            return []
        return [{"kind": TAMPERED_MODE, "detail": f"{modes[0]} torch function mode(s) and {modes[1]} dispatch mode(s) were left active after a call: they see the runner's own torch calls"}]

    def _thread_count_findings(self) -> list:
        now = (_num_threads(), _num_interop_threads())
        if now[0] <= self._threads[0] and now[1] <= self._threads[1]:
            return []
        return [{"kind": EXTRA_THREADS, "detail": f"PyTorch's threads went from {self._threads[0]} intra-op / {self._threads[1]} inter-op to {now[0]} / {now[1]}: the reference runs with the runner's threads"}]

    def findings(self) -> list:
        found, self._pending = self._pending, []
        self.check_precision("while running")
        found += self._pending
        self._pending = []
        found += self.auditor.drain()
        if self._input_path is not None:
            found += self._input_path()
        found += self.threads.findings()
        found += self.baseline.check()
        if self._model is not None:
            found += self._model.findings()
        if self._reference is not None:
            found += self._reference.findings()
        found += self.idle.findings()
        found += self._mode_findings()
        found += self._thread_count_findings()
        fresh = []
        for f in found:
            if f["kind"] not in self._reported:
                self._reported.add(f["kind"])
                fresh.append(f)
        return fresh


class Twin:
    """The reference's copy of the candidate guard's untimed work between calls, with nothing
    reported: the same baseline check at the end of a block and the same CPU-clock reads around
    every request. cudal1's own clock compares the untimed time per call of the two sides (work
    that escaped the timer shows there), so what the runner itself does outside the timed calls
    must cost the same on both sides: on an H100 the candidate's checks alone took about 6 ms a
    block, and honest light candidates were judged `untimed_work`."""

    def __init__(self) -> None:
        self.baseline = Baseline(thread_entries())
        self.idle = IdleMeter()

    def findings(self) -> list:
        self.baseline.check()
        self.idle.findings()
        return []
