"""What the candidate runner's guard costs per request on this machine: `Baseline.check()` (the
identity check of the watched modules), timed after CUDA is initialised, as a runner does.
    python3 bench/guard_cost.py"""
import sys
import time

sys.path.insert(0, "python")
import torch  # noqa: E402

from cudal1_runner import tamper  # noqa: E402

if torch.cuda.is_available():
    torch.zeros(1, device="cuda") @ torch.zeros(1, 1, device="cuda")
    torch.cuda.synchronize()
b = tamper.Baseline()
for label, f in (("unchanged()", b.unchanged), ("check()", b.check)):
    f()
    t0 = time.perf_counter()
    n = 50
    for _ in range(n):
        f()
    print(f"{label}: {(time.perf_counter() - t0) / n * 1e3:.3f} ms; unchanged now: {b.unchanged()}; entries {len(b._entries)}")
