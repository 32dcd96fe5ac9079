"""The candidate role's watch over untrusted code, as findings after every call.

``Guard`` is created when the runner starts, before any task or candidate code runs, and holds:
the audit hook (``gc`` scans, frame reads), the thread-start wrappers, the baseline of functions
that timing and checks rely on, the precision settings, the constructed model's entry points, the
reference module's globals and the CPU time used between requests. ``findings()`` returns what is
new since the last call; each finding is reported once per process.
"""

from . import precision
from .audit import Auditor
from .idle import IdleMeter
from .modelcheck import ModelSnapshot
from .origin import Origins
from .refcheck import ReferenceWatch
from .tamper import Baseline, thread_entries
from .threads import ThreadWatch

TAMPERED_TF32 = "tampered_tf32"


class Guard:
    def __init__(self) -> None:
        self.origins = Origins()
        self.auditor = Auditor(self.origins)
        self.auditor.install()
        self.threads = ThreadWatch(self.origins)
        self.threads.install()
        self.baseline = Baseline(thread_entries())
        self.idle = IdleMeter()
        self._precision = None
        self._model = None
        self._reference = None
        self._pending = []
        self._reported = set()

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

    def findings(self) -> list:
        found, self._pending = self._pending, []
        self.check_precision("while running")
        found += self._pending
        self._pending = []
        found += self.auditor.drain()
        found += self.threads.findings()
        found += self.baseline.check()
        if self._model is not None:
            found += self._model.findings()
        if self._reference is not None:
            found += self._reference.findings()
        found += self.idle.findings()
        fresh = []
        for f in found:
            if f["kind"] not in self._reported:
                self._reported.add(f["kind"])
                fresh.append(f)
        return fresh
