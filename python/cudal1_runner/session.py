"""One runner process's state and its operations.

``Session`` holds what ``load`` produced (the device, the model, the reference's input source)
and answers each request with a reply dict. Exceptions from task or candidate code become error
replies; the session keeps serving afterwards.
"""

import gc
import os
import sys
import time

import torch

from . import compile as compiling
from . import environment, extensions, precision, seeding
from . import inputs as inputs_mod
from . import outputs as outputs_mod
from . import requests as req
from . import sharing, timing
from .capture import capture
from .compare import compare
from .errors import BAD_REQUEST, INTERNAL, LOAD_ERROR, RUNTIME_ERROR, RunnerError, classify, with_context
from .loading import load_module, require
from .guard import Guard, Twin
from .wire import decode, refusal, reply
from .seeding import seed_all

# A spin covers the host's issue time; longer than this is a mistake, not a measurement.
_MAX_SPIN_US = 100_000

_OPS = {
    "reference": {"hello", "shutdown", "load", "outputs", "expected", "compare", "time", "describe", "release"},
    "candidate": {"hello", "shutdown", "load", "outputs", "time", "reveal", "release"},
    "compile": {"hello", "shutdown", "compile"},
}


class Session:
    def __init__(self, role: str) -> None:
        self.role = role
        self.device = None
        self.model = None
        self.source = None
        # The input path (``inputs.make_path``), made when a task loads, before the candidate.
        self.inputs = None
        # The last timed block's captured outputs, until the next request that runs the model.
        self.kept = None
        # Outputs kept on the device instead of saved (``share_bytes``): the candidate's exported
        # copies, or the reference's expected outputs by seed. Until ``release``.
        self.held = Held()
        self._flushers = {}
        # Touches no GPU until it first spins (it calibrates then).
        self.spinner = timing.Spinner()
        # Made before any task or candidate code runs: its baseline is the untouched runtime.
        self.guard = Guard() if role == "candidate" else None
        # The reference does the same untimed checking, for nothing (``Twin``).
        self.twin = Twin() if role == "reference" else None

    @property
    def inspects(self) -> bool:
        """Only the untrusted candidate's outputs are inspected for findings."""
        return self.role == "candidate"

    def serve(self, line: bytes):
        """Answer one request line; returns (reply, stop)."""
        meter = self.guard.idle if self.guard is not None else (self.twin.idle if self.twin is not None else None)
        if meter is not None:
            meter.request_started()
        try:
            return self._serve(line)
        finally:
            if meter is not None:
                meter.request_done()

    def _serve(self, line: bytes):
        try:
            request = decode(line)
        except ValueError as exc:
            return _error(None, RunnerError(BAD_REQUEST, f"request is not JSON: {exc}")), False
        if not isinstance(request, dict):
            return _error(None, RunnerError(BAD_REQUEST, "request is not a JSON object")), False
        rid = request.get("id")
        op = request.get("op")
        if not isinstance(op, str):
            return _error(rid, RunnerError(BAD_REQUEST, "request has no string `op`")), False
        if op not in _OPS[self.role]:
            return _error(rid, RunnerError(BAD_REQUEST, f"op `{op}` is not served by the {self.role} role")), False
        try:
            fields = getattr(self, "_op_" + op)(request)
        except RunnerError as err:
            return _error(rid, err), False
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return _error(rid, classify(exc, INTERNAL)), False
        return reply(rid, fields), op == "shutdown"

    # --- ops -------------------------------------------------------------------------------

    def _op_hello(self, request: dict) -> dict:
        return environment.hello()

    def _op_shutdown(self, request: dict) -> dict:
        return {}

    def _op_load(self, request: dict) -> dict:
        started = time.perf_counter_ns()
        reference = req.abs_path(request, "reference")
        candidate = req.abs_path(request, "candidate", None)
        device = _device(req.field(request, "device", str))
        init_seed = req.seed(req.field(request, "init_seed", int), "init_seed")
        allow_tf32 = bool((req.field(request, "precision", (dict, type(None)), None) or {}).get("allow_tf32", False))
        if reference is None:
            raise RunnerError(BAD_REQUEST, "`reference` is required")
        if self.role == "candidate" and candidate is None:
            raise RunnerError(BAD_REQUEST, "the candidate role needs `candidate`")
        reloading = self.role == "reference" and self.model is not None
        if reloading:
            # Another task in the same process (correctness checks reuse references): what the
            # last task's module may have changed goes back to PyTorch's defaults first.
            _reset_process_state(self)
        self.model = self.source = self.inputs = None
        guard = self.guard
        if self.role == "reference" and device.type == "cuda":
            if reloading:
                # The last task's device memory goes back to the device: the engine admits other
                # jobs beside this process by what its new task needs, not by its old one's.
                gc.collect()
                torch.cuda.empty_cache()
            # `expected` reports the most this task held (``device_peak_bytes``), not an earlier one.
            torch.cuda.reset_peak_memory_stats(device)

        precision.apply(allow_tf32)
        scale = req.field(request, "scale", (int, float, type(None)), None)
        ref = load_module(reference, "reference")
        require(ref, ["get_inputs", "get_init_inputs"] + (["Model"] if self.role == "reference" else []), "reference")
        source = inputs_mod.InputSource(ref)
        # Before any candidate code runs: the trial's smaller inputs come from the reference alone.
        scaled = _phase(lambda: source.scale_leading(scale), "scaling the inputs", LOAD_ERROR) if scale is not None else []
        # Made before any candidate code runs: everything it calls is bound now.
        path = inputs_mod.make_path(source, device)
        if self.role == "candidate":
            guard.input_path_made(path.findings)
            guard.reference_loaded(ref, reference)
            precision.apply(allow_tf32)
            guard.precision_set()
            if _builds_extensions(candidate):
                # Its builds go where the compile pool built them, and their time is counted.
                extensions.install()
            cand = load_module(candidate, "candidate")
            guard.check_precision("when the candidate was imported")
            require(cand, ["ModelNew"], "candidate")
            cls, label = vars(cand)["ModelNew"], "ModelNew"
        else:
            cls, label = vars(ref)["Model"], "Model"
        # Undo precision flags that the imported code may have flipped.
        precision.apply(allow_tf32)

        with torch.no_grad():
            init = _phase(lambda: _seeded(init_seed, source.get_init_inputs), "reference get_init_inputs()", LOAD_ERROR)
            model = _phase(lambda: _construct(cls, init, init_seed, device), f"constructing {label}", LOAD_ERROR)
            if guard is not None:
                guard.check_precision("while ModelNew was constructed")
            precision.apply(allow_tf32)
            # Only the reference's specs are used (a candidate's would be a claim about inputs it
            # never makes), and reading them costs a first meta-tensor operation.
            probe = _phase(lambda: _input_specs(source), "reference get_inputs()", LOAD_ERROR) if self.role == "reference" else []
        parameters = _phase(lambda: sum(int(p.numel()) for p in model.parameters()), f"{label}.parameters()", LOAD_ERROR)
        if guard is not None:
            guard.constructed(model)

        self.device, self.model, self.source = device, model, source
        self.inputs = path
        return {
            "inputs": probe,
            "init_inputs": [inputs_mod.spec(v) for v in init],
            "parameters": parameters,
            "scaled": scaled,
            "load_ms": (time.perf_counter_ns() - started) / 1e6,
            "extension_ms": extensions.spent_ms(),
        }

    def _op_describe(self, request: dict) -> dict:
        """What a task takes and holds, without allocating it: ``get_inputs()``, the model and
        ``get_init_inputs()`` run with PyTorch's default device set to ``meta``, so tensors have
        shapes and dtypes but no storage. A task that cannot run that way (it moves tensors to a
        device by name, or reads their values) is loaded for real on the CPU, and ``method``
        says so."""
        reference = req.abs_path(request, "reference")
        scale = req.field(request, "scale", (int, float, type(None)), None)
        meta_only = req.field(request, "meta_only", bool, False)
        ref = load_module(reference, "reference")
        # One runner describes many tasks: each module goes once it is described.
        sys.modules.pop(ref.__name__, None)
        require(ref, ["get_inputs", "get_init_inputs", "Model"], "reference")
        source = inputs_mod.InputSource(ref)
        scaled = _phase(lambda: source.scale_leading(scale), "scaling the inputs", LOAD_ERROR) if scale is not None else []
        cls = vars(ref)["Model"]
        note = None
        try:
            with torch.device("meta"), torch.no_grad():
                return {**_described(source, cls, "meta", None), "scaled": scaled}
        except Exception as exc:  # the task's own code failed on meta tensors
            note = f"meta tensors failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        if meta_only:
            # Sizes are unknown; running the task for real to learn them is what the caller avoids.
            return {"inputs": [], "init_inputs": [], "parameters": 0, "method": "none", "note": note, "scaled": scaled}
        with torch.no_grad():
            described = _phase(lambda: _described(source, cls, "cpu", note + "; loaded on the CPU instead"), "describing the reference", LOAD_ERROR)
        return {**described, "scaled": scaled}

    def _op_outputs(self, request: dict) -> dict:
        self._require_loaded()
        seeds = req.seeds(request)
        out_dir = req.abs_path(request, "dir")
        share_bytes = _share_bytes(request)
        self.kept = None
        results = []
        with torch.no_grad():
            for seed in seeds:
                try:
                    results.append(self._one_output(seed, out_dir, share_bytes))
                except BaseException as exc:
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    raise with_context(classify(exc, RUNTIME_ERROR), f"seed {seed}") from None
        return {"results": results, "extension_ms": extensions.spent_ms()}

    def _op_expected(self, request: dict) -> dict:
        reply = self._op_outputs(request)
        if self.device is not None and self.device.type == "cuda":
            # What the allocator has held since the task loaded: its parameters, one call's
            # inputs, outputs and temporaries, and the expected outputs kept. The engine admits
            # the task's next jobs by it.
            reply["device_peak_bytes"] = int(torch.cuda.max_memory_reserved(self.device))
        return reply

    def _one_output(self, seed: int, out_dir: str, share_bytes: int) -> dict:
        collecting = gc.isenabled()
        try:
            args = self.inputs.next_inputs(seed)
        finally:
            # The input path turns the collector off; an untimed call runs as the program would.
            if collecting:
                gc.enable()
        # Fingerprint before the call: the model may edit its inputs.
        input_digest = inputs_mod.digest(args)
        clones = inputs_mod.snapshot(args) if self.inspects else None
        seeding.reseed_for_call(seed)
        self._sync()
        t0 = timing.clock_ns()
        out = self.model(*args)
        gpu = self.device.type == "cuda"
        early = capture(out) if self.inspects and gpu else None
        self._sync()
        ms = (timing.clock_ns() - t0) / 1e6
        # Before anything of the candidate's can run again (see ``capture``).
        captured = capture(out, strict=not self.inspects)
        findings = []
        if self.inspects:
            flat = outputs_mod.leaves(out)
            findings += outputs_mod.output_findings(flat, args, self.device)
            findings += outputs_mod.mutation_findings(args, clones)
            # The guard's findings name causes (a thread left running); readiness, a symptom.
            findings += self.guard.findings()
            if early is not None:
                findings += outputs_mod.readiness_findings(early, flat)
            findings += outputs_mod.changed_findings(captured, flat)
        where = self.held.keep(self, seed, captured, share_bytes)
        if where is None:
            where = {"path": os.path.join(out_dir, f"seed-{seed}.pt")}
            outputs_mod.save(where["path"], captured.host())
        return {
            "seed": seed,
            **where,
            "nbytes": captured.nbytes,
            "ms": ms,
            "findings": findings,
            "input_digest": input_digest,
            "fingerprint": captured.fingerprint(not gpu),
        }

    def _op_compare(self, request: dict) -> dict:
        expected = _output_ref(request, "expected")
        actual = _output_ref(request, "actual")
        atol = req.number(request, "atol")
        rtol = req.number(request, "rtol")
        device = self.device if self.device is not None and self.device.type == "cuda" else None
        if "kept" in expected:
            copies = self.held.expected.get(expected["kept"])
            if copies is None:
                raise RunnerError(BAD_REQUEST, f"no expected output of seed {expected['kept']} is kept")
            expected = {"tensors": copies}
        if "shared" in actual:
            if device is None:
                raise RunnerError(BAD_REQUEST, "shared outputs need a CUDA device")
            entries = actual["shared"]
            actual = {"open": lambda: sharing.open_copy(entries, device)}
        return compare(expected, actual, atol, rtol, device)

    def _op_release(self, request: dict) -> dict:
        released = self.held.release()
        if self.role == "reference" and self.device is not None and self.device.type == "cuda":
            # A reference waits between checks holding only its task: what the checks'
            # outputs took goes back to the device, where the engine admits other jobs by their
            # needs (the allocator would keep it reserved for this process otherwise).
            gc.collect()
            torch.cuda.empty_cache()
        return {"released_bytes": released}

    def _op_time(self, request: dict) -> dict:
        self._require_loaded()
        seeds = req.seeds(request)
        flush_l2 = req.field(request, "flush_l2", bool, True)
        warmup = req.field(request, "warmup", bool, False)
        keep_bytes = req.field(request, "keep_bytes", int, 0)
        if keep_bytes < 0:
            raise RunnerError(BAD_REQUEST, "`keep_bytes` must not be negative")
        cpu = req.field(request, "cpu", (int, type(None)), None)
        if cpu is not None and cpu < 0:
            raise RunnerError(BAD_REQUEST, "`cpu` must be a core number")
        spin_us = req.field(request, "spin_us", (int, float, type(None)), None)
        if spin_us is not None and (isinstance(spin_us, bool) or not 0 <= spin_us <= _MAX_SPIN_US):
            raise RunnerError(BAD_REQUEST, f"`spin_us` must be a number of microseconds in [0, {_MAX_SPIN_US}]")
        with torch.no_grad():
            return timing.run(self, seeds, flush_l2, warmup, cpu, spin_us, keep_bytes)

    def _op_reveal(self, request: dict) -> dict:
        """The kept outputs of some of the last block's calls, chosen after the block returned."""
        calls = req.field(request, "calls", list)
        out_dir = req.abs_path(request, "dir")
        share_bytes = _share_bytes(request)
        kept = self.kept
        if kept is None:
            raise RunnerError(BAD_REQUEST, "no timed block to reveal outputs of")
        for i in calls:
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(kept.copies) or kept.copies[i] is None:
                raise RunnerError(BAD_REQUEST, f"call {i!r} of the last block has no kept output")
        return timing.reveal(self, calls, out_dir, share_bytes)

    def _op_compile(self, request: dict) -> dict:
        candidate = req.abs_path(request, "candidate")
        reference = req.abs_path(request, "reference", None)
        return compiling.run(candidate, reference)

    # --- helpers ---------------------------------------------------------------------------

    def _require_loaded(self) -> None:
        if self.model is None:
            raise RunnerError(BAD_REQUEST, "no program loaded: send `load` first")

    def _sync(self) -> None:
        if self.device.type == "cuda":
            timing.device_sync()

    def l2_flusher(self):
        key = str(self.device)
        if key not in self._flushers:
            self._flushers[key] = timing.L2Flusher(self.device)
        return self._flushers[key]


class Held:
    """Outputs kept on the device in place of files, within the byte budget a request names."""

    def __init__(self) -> None:
        self.exported = []
        self.expected = {}
        self.nbytes = 0

    def keep(self, session, seed: int, captured, budget: int):
        """The reply's fields for an output kept on the device, or None: save it to a file."""
        copies = captured.copies
        if budget <= 0 or self.nbytes + captured.nbytes > budget or not sharing.shareable(copies, session.device):
            return None
        if session.inspects:
            try:
                entries = [sharing.export(t) for t in copies]
            except sharing.SharingError:
                return None
            session._sync()
            self.exported.append(copies)
            self.nbytes += captured.nbytes
            return {"shared": entries}
        self.expected[seed] = copies
        self.nbytes += captured.nbytes
        return {"kept": True}

    def release(self) -> int:
        released = self.nbytes
        self.exported, self.expected, self.nbytes = [], {}, 0
        return released


def _share_bytes(request: dict) -> int:
    value = req.field(request, "share_bytes", int, 0)
    if isinstance(value, bool) or value < 0:
        raise RunnerError(BAD_REQUEST, "`share_bytes` must be a non-negative number of bytes")
    return value


def _output_ref(request: dict, name: str) -> dict:
    """A path (a file), ``{"kept": seed}`` or ``{"shared": [...]}``."""
    value = req.field(request, name, (str, dict))
    if isinstance(value, str):
        value = {"file": value}
    if len(value) != 1:
        raise RunnerError(BAD_REQUEST, f"`{name}` must have exactly one of `file`, `kept`, `shared`")
    (kind, item), = value.items()
    if kind == "file":
        if not isinstance(item, str) or not os.path.isabs(item):
            raise RunnerError(BAD_REQUEST, f"`{name}.file` must be an absolute path, got {item!r}")
        return {"file": item}
    if kind == "kept":
        return {"kept": req.seed(item, f"{name}.kept")}
    if kind == "shared":
        return {"shared": item}
    raise RunnerError(BAD_REQUEST, f"`{name}` must have exactly one of `file`, `kept`, `shared`, not `{kind}`")


def _described(source, cls, method: str, note) -> dict:
    init = _seeded(0, source.get_init_inputs)
    seed_all(0)
    model = cls(*init)
    parameters = sum(int(p.numel()) for p in model.parameters())
    probe = _seeded(0, source.get_inputs)
    reply = {
        "inputs": [inputs_mod.spec(v) for v in probe],
        "init_inputs": [inputs_mod.spec(v) for v in init],
        "parameters": parameters,
        "method": method,
        "input_bytes": inputs_mod.nbytes(probe),
        "parameter_bytes": sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers())),
    }
    if method == "meta":
        # One call on meta tensors gives the outputs' sizes; a task whose forward cannot run
        # there (it reads values) just has none.
        try:
            out = model.eval()(*probe)
            reply["outputs"] = [inputs_mod.spec(v) for v in (out if isinstance(out, (list, tuple)) else [out])]
            reply["output_bytes"] = inputs_mod.nbytes(out)
        except Exception:
            pass
    if note:
        reply["note"] = note
    return reply


def _builds_extensions(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    return "load_inline" in text or "cpp_extension" in text


def _error(rid, err: RunnerError) -> dict:
    return refusal(rid, err.to_reply())


def _device(name: str) -> torch.device:
    try:
        device = torch.device(name)
    except Exception as exc:
        raise RunnerError(BAD_REQUEST, f"bad device {name!r}: {exc}") from exc
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise RunnerError(BAD_REQUEST, f"device type {device.type!r} is not supported")
    if not torch.cuda.is_available():
        raise RunnerError(BAD_REQUEST, f"device {name!r} requested but CUDA is not available")
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise RunnerError(BAD_REQUEST, f"device {name!r} does not exist ({torch.cuda.device_count()} visible)")
    # Synchronisation and events act on the current device: make it the requested one.
    torch.cuda.set_device(index)
    # Set up now, before any task or candidate code runs: seeding binds its generators.
    torch.cuda.init()
    seeding.bind_cuda(torch.cuda.default_generators)
    return torch.device("cuda", index)


def _input_specs(source) -> list:
    """The inputs' specs, read on meta tensors where the task allows it: a large task's inputs
    are not made in full just to be described."""
    try:
        with torch.device("meta"):
            values = _seeded(0, source.get_inputs)
    except RunnerError:
        raise
    except Exception:
        values = _seeded(0, source.get_inputs)
    return [inputs_mod.spec(v) for v in values]


def _reset_process_state(session) -> None:
    """PyTorch's process-wide settings that a task's module may change at import (as KernelBench
    tasks sometimes do) back to their defaults, and the last task's module and outputs gone,
    before a reference loads its next task."""
    session.held.release()
    session.kept = None
    torch.set_default_dtype(torch.float32)
    torch.set_default_device(None)
    torch.set_grad_enabled(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    for name in [n for n in sys.modules if n.startswith("_cudal1_reference_")]:
        sys.modules.pop(name, None)


def warm_meta() -> None:
    """Pays PyTorch's first operation on meta tensors, which imports sympy and PyTorch's
    reference implementations (2-3 s where their bytecode is not cached). The reference role
    sizes tasks and reads input specs on meta tensors; doing this before the first request moves
    that cost into the time a reference started ahead waits for its turn."""
    with torch.device("meta"):
        torch.randn(1)


def _seeded(seed: int, fn):
    seed_all(seed)
    return fn()


def _construct(cls, init: list, init_seed: int, device: torch.device):
    seed_all(init_seed)
    model = cls(*init).to(device).eval()
    if device.type == "cuda":
        torch.cuda.synchronize()  # surface asynchronous faults of construction here
    return model


def _phase(fn, what: str, default_kind: str):
    try:
        return fn()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        err = classify(exc, default_kind)
        raise with_context(err, what) from None
