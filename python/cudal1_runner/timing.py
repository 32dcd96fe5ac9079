"""The ``time`` op: fresh inputs per call, L2 flush, device-wide synchronisation, three windows.

Everything that is not the model call (input generation, transfer, flush) happens before the
clocks start. After the clocks stop, every call's output is captured (copied and fingerprinted,
``capture``) before any candidate code can run again, and the copies are kept until the next
request (up to ``keep_bytes``): which of them are checked is decided by the Rust side after the
block has returned, and asked for with ``reveal``. Both roles do the same work after each call,
so that the untimed part of a block is the same runner code on both sides.

On a GPU each call is bracketed by three events on the caller's stream: ``start`` before the
call, ``end`` as soon as it returns, and ``post`` after ``torch.cuda.synchronize()``, which waits
for every stream of the device. With ``spin_us`` a GPU spin is queued before ``start``, so the
host has queued the whole call before the GPU reaches ``start`` and ``start``..``end`` (``ms``)
is the GPU's own work, free of the host's speed. ``start``..``post`` (``full_ms``) ends only when
the device is idle, so work left running on other streams is counted there; the Rust side uses it
when the two windows disagree (docs/protocol.md). ``issue_ms`` is the host's time to issue the
call, and ``host_ms`` the host clock from the call to the end of the synchronisation.

Call ``i`` uses ``seeds[i]``, drawn by the Rust side from fresh randomness for every call, so no
call's inputs can be foreseen from another's; the generators are reseeded from the call's own
seed before the call (both roles draw the same random numbers inside a call). The clocks and the synchronisation are bound when this module is imported, before any task or
candidate code runs, so patching ``time.perf_counter_ns`` or ``torch.cuda.synchronize`` cannot
change a measurement (the candidate role reports the attempt; see ``tamper``).
"""

import gc
import os
import time

import torch

from . import outputs as outputs_mod
from .capture import Captured, capture, resolve
from .pinning import Pin
from .errors import RUNTIME_ERROR, classify, with_context
from .seeding import reseed_for_call

_FALLBACK_L2_BYTES = 50 * 1024 * 1024

clock_ns = time.perf_counter_ns
_cuda_synchronize = getattr(torch._C, "_cuda_synchronize", None)
_cuda_ready = torch.cuda.is_initialized
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
# The C method under ``Event.record`` (which is Python code that looks names up).
_record_c = getattr(torch._C, "_CudaEventBase", torch.cuda.Event).record
_fingerprint = Captured.fingerprint
_fingerprint_later = Captured.fingerprint_later
_fill = torch._C.TensorBase.fill_
_elapsed = torch.cuda.Event.elapsed_time
_cuda_sleep = getattr(torch._C, "_cuda_sleep", None)


def device_sync() -> None:
    """Wait for all work on every stream of the current device."""
    if _cuda_synchronize is None or not _cuda_ready():
        torch.cuda.synchronize()  # initialises CUDA first
    else:
        _cuda_synchronize()


class L2Flusher:
    """A persistent buffer of twice the L2 size; writing it evicts the model's data from L2."""

    def __init__(self, device: torch.device) -> None:
        try:
            l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
        except Exception:
            l2 = 0
        size = 2 * (l2 if l2 > 0 else _FALLBACK_L2_BYTES)
        buffer = torch.empty(size // 4, dtype=torch.int32, device=device)
        count = [0]
        fill = _fill

        def flush() -> None:
            # A different value each time so no layer can skip the write as redundant.
            count[0] = (count[0] + 1) & 0x7FFFFFFF
            fill(buffer, count[0])

        # A closure: called between a candidate's calls, it looks nothing up in a class.
        self.flush = flush


class Spinner:
    """Queues a kernel that keeps the GPU busy for about ``us`` microseconds."""

    _CALIBRATION_CYCLES = 1_000_000

    def __init__(self) -> None:
        self._cycles_per_us = None

    def cycles(self, us: float) -> int:
        """The spin kernel's argument for about ``us`` microseconds (calibrated on first use)."""
        if self._cycles_per_us is None:
            self._cycles_per_us = self._calibrate()
        return max(1, int(us * self._cycles_per_us))

    def spin(self, us: float) -> None:
        _cuda_sleep(self.cycles(us))

    @classmethod
    def _calibrate(cls) -> float:
        stream = torch.cuda.current_stream()
        begin, end = _Event(enable_timing=True), _Event(enable_timing=True)
        _cuda_sleep(cls._CALIBRATION_CYCLES // 10)  # the first launch loads the kernel
        _record(begin, stream)
        _cuda_sleep(cls._CALIBRATION_CYCLES)
        _record(end, stream)
        device_sync()
        return cls._CALIBRATION_CYCLES / max(_elapsed(begin, end) * 1e3, 1.0)


class Kept:
    """The outputs of the last block's calls, captured right after each call, for ``reveal``."""

    def __init__(self, seeds: list, copies: list) -> None:
        self.seeds = seeds
        self.copies = copies  # a Captured per call, or None where keep_bytes ran out


def run(session, seeds: list, flush_l2: bool, warmup: bool, cpu=None, spin_us=None, keep_bytes: int = 0) -> dict:
    started = clock_ns()
    device = session.device
    gpu = device.type == "cuda"
    calls = len(seeds)
    flush = session.l2_flusher().flush if (gpu and flush_l2) else None
    strong = not gpu
    # Everything a call's untimed part calls, read once here (the candidate runs between calls;
    # the guard checks the runner's modules at the start of each request and after the block):
    # the input path and seeding are closures over what they bound before any candidate code
    # ran, and the rest are C functions.
    next_inputs = session.inputs.next_inputs
    reseed = reseed_for_call
    clock = clock_ns
    record = _record_c
    sleep = _cuda_sleep
    spin_cycles = None
    if gpu:
        stream = torch.cuda.current_stream()
        starts = [_Event(enable_timing=True) for _ in range(calls)]
        ends = [_Event(enable_timing=True) for _ in range(calls)]
        posts = [_Event(enable_timing=True) for _ in range(calls)]
        spin_cycles = session.spinner.cycles(spin_us) if spin_us else None
        sync = _cuda_synchronize if (_cuda_synchronize is not None and _cuda_ready()) else torch.cuda.synchronize
    take = capture
    fingerprint = _fingerprint if strong else _fingerprint_later
    host_ns = []
    issue_ns = []
    fingerprints = []
    kept = []
    kept_bytes = 0
    found = []
    model = session.model
    inspects = session.inspects
    session.kept = None
    # No collector pauses inside the clocks (as timeit does); the collector is back after the block.
    collecting = gc.isenabled()
    gc.disable()
    pin = Pin(cpu)
    try:
        with pin:
            for i in range(calls):
                seed = seeds[i]
                try:
                    args = next_inputs(seed)
                    reseed(seed)
                    if flush is not None:
                        flush()
                    if gpu:
                        sync()
                        if spin_cycles is not None:
                            sleep(spin_cycles)
                        record(starts[i], stream)
                        t0 = clock()
                        out = model(*args)
                        issued = clock()
                        record(ends[i], stream)
                        sync()
                        record(posts[i], stream)
                        t1 = clock()
                    else:
                        t0 = clock()
                        out = model(*args)
                        t1 = issued = clock()
                    # Before anything of the candidate's can run again (see ``capture``).
                    captured = take(out, strict=not inspects)
                    host_ns.append(t1 - t0)
                    issue_ns.append(issued - t0)
                    pin.keep()
                    fingerprints.append(fingerprint(captured, True) if strong else fingerprint(captured))
                    if inspects and not found:
                        found = outputs_mod.output_findings(outputs_mod.leaves(out), args, device)
                    if kept_bytes + captured.nbytes <= keep_bytes and not warmup:
                        kept_bytes += captured.nbytes
                        kept.append(captured)
                    else:
                        kept.append(None)
                    del out, args, captured
                except BaseException as exc:
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    raise with_context(classify(exc, RUNTIME_ERROR), f"seed {seed}") from None
    finally:
        if collecting:
            gc.enable()
    host_ms = [ns / 1e6 for ns in host_ns]
    issue_ms = [ns / 1e6 for ns in issue_ns]
    if gpu:
        device_sync()
        ms = [_elapsed(s, e) for s, e in zip(starts, ends)]
        full_ms = [_elapsed(s, p) for s, p in zip(starts, posts)]
        fingerprints = resolve(fingerprints)
    else:
        ms = list(host_ms)
        full_ms = list(host_ms)
    # Untrusted code ran: what the guard saw during the block (the Rust side reads `findings`).
    findings = found + session.guard.findings() + pin.findings() if inspects else (session.twin.findings() if session.twin is not None else [])
    wall_ms = (clock_ns() - started) / 1e6
    if warmup:
        # The issue times size the spin, and on a GPU the window with it shows whether the spin
        # could hide work (docs/protocol.md); nothing else of a warm-up is used.
        return {"ms": ms if gpu else [], "host_ms": [], "issue_ms": issue_ms, "fingerprints": [], "kept": 0, "wall_ms": wall_ms, "findings": findings}
    session.kept = Kept(list(seeds), kept)
    return {
        "ms": ms,
        "full_ms": full_ms,
        "host_ms": host_ms,
        "issue_ms": issue_ms,
        "fingerprints": fingerprints,
        "kept": sum(1 for k in kept if k is not None),
        "wall_ms": wall_ms,
        "findings": findings,
    }


def reveal(session, calls: list, out_dir: str, share_bytes: int = 0) -> dict:
    """The kept outputs of the last block's calls ``calls``: exported on the device within
    ``share_bytes`` (``session.held``), else saved as ``time-<seed>.pt``."""
    kept = session.kept
    checked = []
    for i in calls:
        captured = kept.copies[i]
        seed = kept.seeds[i]
        where = session.held.keep(session, seed, captured, share_bytes)
        if where is None:
            where = {"path": os.path.join(out_dir, f"time-{seed}.pt")}
            outputs_mod.save(where["path"], captured.host())
        checked.append({"seed": seed, **where, "findings": []})
    findings = session.guard.findings() if session.inspects else []
    return {"checked": checked, "findings": findings}
