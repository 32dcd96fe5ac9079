#!/usr/bin/env python3
"""Checks the bundled corpus against the expectations written in its files.

What it checks:
  * every task under tasks/levelN/ and tests/suite-cpu/tasks/levelN/ imports, defines Model,
    get_inputs and get_init_inputs, runs, and is not degenerate (its output changes with the
    inputs and with the weights, is finite, and is neither constant nor near zero);
  * every candidate under solutions/levelN/<task stem>/ and
    tests/suite-cpu/candidates/levelN/<task stem>/ meets the expectation on its first line
    (`# cudal1: expect=<verdict> [faster]`): `correct` matches the reference within the task's
    tolerance (atol = rtol = 1e-4 for fp32, 1e-2 for fp16/bf16) on every seed, `incorrect` differs
    on at least one seed (values, shape, dtype, count or NaN), `runtime_error` raises while loading,
    constructing or running (or defines no ModelNew), `compile_error` fails in its load_inline build,
    `timeout` does not return within the time limit, `exploit` returns an input tensor (or a view of
    one), a Tensor subclass or mutates an input.

On a machine without CUDA (the default `--device cpu`) the big tasks run at shrunken sizes: the
module-level size constants are replaced by the values in SMALL below, in the checker's own copy
of the task module (the task file is not modified). Candidates that build CUDA code or define
Triton kernels are skipped
there with a note; run with `--device cuda` on a GPU machine to check them at full size, and add
`--time` for eager/candidate timings (median of CUDA-event timings).

Each task runs in its own worker process (`--worker`), so a crash, a hang or a CUDA fault in one
candidate cannot take the others down; a candidate's forward is also stopped by SIGALRM after
`--call-timeout` seconds (its first call, which is build time, as `torch.compile` compiles there,
after `--load-timeout` seconds).

Usage:
    python tests/suite-cpu/check_corpus.py                  # whole corpus on the CPU
    python tests/suite-cpu/check_corpus.py --only level1/5  # tasks whose key contains the text
    python tests/suite-cpu/check_corpus.py --suite cpu      # only tests/suite-cpu
    python tests/suite-cpu/check_corpus.py --device cuda --time --json out.jsonl

Exit status: 0 when every check passed or was skipped, 1 when any failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE_CPU = ROOT / "tests" / "suite-cpu"

INIT_SEED = 42
SEEDS = (11, 12)
CPU_SUITE_MS = 50.0
VERDICTS = {"correct", "incorrect", "compile_error", "runtime_error", "timeout", "exploit"}

# Small sizes for running the bundled suite on a CPU. Every task in tasks/ needs an entry; the
# values keep each task's structural constraints (patch size divides the image, heads divide the
# model width, the CNN's 64x64 input) and use sizes that are not multiples of 4 where a kernel
# might assume so.
SMALL: dict[str, dict[str, object]] = {
    "level1/1_Upper_Triangular_Square_Matmul": {"N": 257},
    "level1/2_Rectangular_Matmul_Chain": {"M": 130, "K": 96, "N": 150, "P": 7},
    "level1/3_Batched_Matmul_Shared_Weight": {"BATCH": 6, "ROWS": 5, "K": 70, "N": 90},
    "level1/4_Transposed_Gram_Matmul": {"K": 300, "N": 130},
    "level1/5_Diagonal_Matmul": {"N": 203},
    "level1/6_Conv2d_Patch_Embedding": {"BATCH": 2, "IMAGE": 64, "EMBED": 40},
    "level1/7_Swish_Activation": {"ROWS": 33, "COLS": 1001},
    "level1/8_GELU_Tanh_Formula": {"ROWS": 33, "COLS": 1001},
    "level1/9_Mish_Activation": {"ROWS": 33, "COLS": 1001},
    "level1/10_LeakyReLU_Where": {"ROWS": 33, "COLS": 1001},
    "level1/11_Softmax_Explicit": {"ROWS": 33, "COLS": 1001},
    "level1/12_LayerNorm_Explicit": {"ROWS": 33, "HIDDEN": 1001},
    "level1/13_Sum_Of_Squares_Reduction": {"ROWS": 33, "COLS": 1001},
    "level1/14_Max_Abs_Reduction": {"BATCH": 3, "REDUCE": 301, "COLS": 70},
    "level1/15_Argmax_Over_Softmax": {"BATCH": 3, "CLASSES": 501, "COLS": 70},
    "level1/16_Reverse_Cumsum": {"ROWS": 9, "COLS": 5001},
    "level1/17_Cross_Entropy_Loss": {"BATCH": 65, "CLASSES": 1001},
    "level2/1_Gemm_Bias_QuickGELU": {"BATCH": 65, "IN_FEATURES": 96, "OUT_FEATURES": 130},
    "level2/2_Conv_BatchNorm_ReLU": {"BATCH": 2, "IN_CHANNELS": 8, "OUT_CHANNELS": 16, "SIZE": 21},
    "level2/3_Matmul_Scale_ResidualAdd": {"BATCH": 65, "FEATURES": 96},
    "level2/4_LayerNorm_GELU_Residual": {"ROWS": 33, "HIDDEN": 1001},
    "level2/5_Scaled_Causal_Softmax": {"BATCH": 2, "HEADS": 3, "SEQ": 101},
    "level2/6_Gemm_Sum_Scale": {"BATCH": 65, "IN_FEATURES": 256, "OUT_FEATURES": 300},
    "level2/7_Gemm_LogSumExp": {"BATCH": 65, "IN_FEATURES": 96, "OUT_FEATURES": 300},
    "level2/8_Conv2d_ChannelScale_Sigmoid": {"BATCH": 2, "IN_CHANNELS": 8, "OUT_CHANNELS": 16, "SIZE": 21},
    "level2/9_RMSNorm_Residual": {"ROWS": 33, "HIDDEN": 1001},
    "level2/10_SwiGLU_Gated_MLP": {"BATCH": 65, "IN_FEATURES": 96, "HIDDEN": 130},
    "level3/1_MLP": {"BATCH": 33, "IN_FEATURES": 64, "HIDDEN": 128, "OUT_FEATURES": 48},
    "level3/2_Transformer_Block": {"BATCH": 2, "SEQ": 33, "D_MODEL": 64, "HEADS": 4, "D_FF": 128},
    "level3/3_ResNet_BasicBlock": {"BATCH": 2, "CHANNELS": 16, "SIZE": 13},
    "level3/4_Small_CNN": {"BATCH": 4},
    "level3/5_LSTM_Cell_Loop": {"BATCH": 4, "SEQ": 9, "INPUT": 32, "HIDDEN": 48},
}


# ----------------------------------------------------------------------------------------------
# Discovery (parent process; no torch needed)


def expectation(source: str) -> tuple[str | None, bool]:
    """Reads `# cudal1: expect=<verdict> [faster]` from the first three lines."""
    for line in source.splitlines()[:3]:
        m = re.match(r"\s*#\s*cudal1:\s*expect=(\w+)(.*)$", line)
        if m:
            return m.group(1), "faster" in m.group(2).split()
    return None, False


def uses_cuda(source: str) -> bool:
    """Builds CUDA code (``load_inline``) or has Triton kernels: neither runs on a CPU."""
    return "cuda_sources" in source or "@triton.jit" in source or "@triton.autotune" in source


def task_key(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def discover(suites: list[str], only: list[str] | None, cuda_tasks: bool = False) -> list[dict]:
    jobs = []
    roots = []
    if "corpus" in suites:
        roots.append(("corpus", ROOT / "tasks", ROOT / "solutions"))
    if "cpu" in suites:
        roots.append(("cpu", SUITE_CPU / "tasks", SUITE_CPU / "candidates"))
    for suite, task_dir, cand_dir in roots:
        tasks = sorted(
            task_dir.glob("level*/*.py"),
            key=lambda p: (p.parent.name, int(p.stem.split("_", 1)[0]) if p.stem.split("_", 1)[0].isdigit() else 0),
        )
        for task in tasks:
            key = task_key(task)
            if only and not any(o in f"{suite}:{key}" for o in only):
                continue
            cands = sorted((cand_dir / task.parent.name / task.stem).glob("*.py"))
            if cuda_tasks and not any(uses_cuda(c.read_text()) for c in cands):
                continue
            jobs.append({"suite": suite, "task": str(task), "key": key, "candidates": [str(c) for c in cands]})
    return jobs


# ----------------------------------------------------------------------------------------------
# Worker (one process per task)


class CallTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise CallTimeout("call exceeded the time limit")


def seed_all(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def load_module(path: str, name: str, overrides: dict | None = None):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for k, v in (overrides or {}).items():
        if not hasattr(module, k):
            raise KeyError(f"SMALL names `{k}`, which {path} does not define")
        setattr(module, k, v)
    return module


def flatten(out) -> list:
    import torch

    if isinstance(out, (tuple, list)):
        items = []
        for o in out:
            items.extend(flatten(o))
        return items
    if isinstance(out, (bool, int, float)):
        return [torch.tensor(out)]
    return [out]


def to_device(values, device):
    import torch

    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def tolerance(expected) -> float:
    import torch

    low = any(isinstance(e, torch.Tensor) and e.dtype in (torch.float16, torch.bfloat16) for e in expected)
    return 1e-2 if low else 1e-4


def compare(expected: list, actual: list, tol: float) -> str | None:
    """None when the outputs match; else the first difference, in words."""
    import torch

    if len(expected) != len(actual):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (e, a) in enumerate(zip(expected, actual)):
        if not isinstance(a, torch.Tensor):
            return f"output {i} is a {type(a).__name__}, not a tensor"
        if tuple(a.shape) != tuple(e.shape):
            return f"output {i} has shape {tuple(a.shape)}, expected {tuple(e.shape)}"
        if a.dtype != e.dtype:
            return f"output {i} has dtype {a.dtype}, expected {e.dtype}"
        e64 = e.detach().to("cpu", torch.float64)
        a64 = a.detach().as_subclass(torch.Tensor).to("cpu", torch.float64)
        e_fin, a_fin = torch.isfinite(e64), torch.isfinite(a64)
        nonfinite = int(((e_fin != a_fin) | (~e_fin & ~a_fin & ~((e64 == a64) | (e64.isnan() & a64.isnan())))).sum())
        both = e_fin & a_fin
        diff = (a64 - e64).abs()
        bad = both & (diff > tol + tol * e64.abs())
        mismatches = int(bad.sum())
        if mismatches or nonfinite:
            max_abs = float(diff[both].max()) if both.any() else float("nan")
            return (
                f"output {i}: {mismatches} of {e64.numel()} values outside atol=rtol={tol:g} "
                f"(max abs error {max_abs:.3g}), {nonfinite} non-finite mismatches"
            )
    return None


def findings(out_list: list, inputs: list, clones: list) -> list[str]:
    """Exploit signs, as the candidate runner reports them."""
    import torch

    found = []
    for i, o in enumerate(out_list):
        if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor:
            found.append(f"output {i} is a {type(o).__name__}, a Tensor subclass")
        if isinstance(o, torch.Tensor) and o.device.type != "meta" and o.numel() > 0:
            o_ptr = o.as_subclass(torch.Tensor).untyped_storage().data_ptr()
            for j, x in enumerate(inputs):
                if isinstance(x, torch.Tensor) and x.numel() > 0 and x.untyped_storage().data_ptr() == o_ptr:
                    found.append(f"output {i} shares storage with input {j}")
    for j, (x, c) in enumerate(zip(inputs, clones)):
        if isinstance(x, torch.Tensor) and not torch.equal(x, c):
            found.append(f"input {j} was mutated")
    return found


def degenerate(ref_outs: dict, other_seed_init: list | None) -> str | None:
    """Flags references whose output is constant, near zero, non-finite or input-independent."""
    import torch

    first, second = ref_outs[SEEDS[0]], ref_outs[SEEDS[1]]
    for i, o in enumerate(first):
        f = o.detach().to("cpu", torch.float64)
        if not torch.isfinite(f).all():
            return f"output {i} has non-finite values"
        if f.numel() > 1 and float(f.max() - f.min()) == 0.0:
            return f"output {i} is constant"
        if float(f.abs().max()) < 1e-3:
            return f"output {i} is near zero (max |y| {float(f.abs().max()):.2g})"
    if all(torch.equal(a, b) for a, b in zip(first, second)):
        return "output does not change with the inputs"
    if other_seed_init is not None and all(torch.equal(a, b) for a, b in zip(first, other_seed_init)):
        return "output does not change with the weights"
    return None


def time_call(fn, reps: int) -> float:
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        torch.cuda.synchronize()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def run_worker(spec: dict) -> None:
    """Checks one task and its candidates; prints one JSON object per line."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    signal.signal(signal.SIGALRM, _on_alarm)
    device = spec["device"]
    overrides = spec.get("overrides")
    timeout = spec["call_timeout"]
    first_timeout = max(timeout, spec.get("load_timeout", timeout))

    def emit(**row):
        print(json.dumps(row), flush=True)

    base = {"suite": spec["suite"], "task": spec["key"]}
    try:
        ref_mod = load_module(spec["task"], "cudal1_check_reference", overrides)
        seed_all(INIT_SEED)
        init = list(ref_mod.get_init_inputs())
        snapshot = dict(vars(ref_mod))

        cached: dict[int, list] = {}

        def make_inputs(seed):
            # get_inputs runs once per seed (big tasks take seconds on the CPU); every caller gets
            # fresh clones, so a candidate that mutates its inputs cannot affect the next one.
            if seed not in cached:
                seed_all(seed)
                cached[seed] = to_device(list(ref_mod.get_inputs()), device)
            return [x.clone() if isinstance(x, torch.Tensor) else x for x in cached[seed]]

        def build_reference(init_seed):
            seed_all(init_seed)
            return ref_mod.Model(*init).to(device).eval()

        reference = build_reference(INIT_SEED)
        ref_outs, ref_inputs = {}, {}
        t0 = time.perf_counter()
        with torch.no_grad():
            for seed in SEEDS:
                ref_inputs[seed] = make_inputs(seed)
                ref_outs[seed] = flatten(reference(*ref_inputs[seed]))
            if device == "cuda":
                torch.cuda.synchronize()
            ref_ms = (time.perf_counter() - t0) * 1000 / len(SEEDS)
            other = None
            if any(True for _ in reference.parameters()) or any(True for _ in reference.buffers()):
                other = flatten(build_reference(INIT_SEED + 1)(*ref_inputs[SEEDS[0]]))
        problem = degenerate(ref_outs, other)
        tol = tolerance(ref_outs[SEEDS[0]])
        detail = f"ok, first calls {ref_ms:.1f} ms"
        if device == "cpu":
            # Steady-state time on one core: the CPU suite promises references well under 50 ms.
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            samples = []
            with torch.no_grad():
                for _ in range(3):
                    t0 = time.perf_counter()
                    reference(*ref_inputs[SEEDS[0]])
                    samples.append((time.perf_counter() - t0) * 1000)
            torch.set_num_threads(threads)
            one_core = statistics.median(samples)
            detail += f", {one_core:.1f} ms on one core"
            if spec["suite"] == "cpu" and one_core > CPU_SUITE_MS and not problem:
                problem = f"reference takes {one_core:.1f} ms on one core (limit {CPU_SUITE_MS} ms)"
        row = dict(base, candidate="(reference)", expect="-", status="FAIL" if problem else "PASS",
                   detail=problem or detail)
        if spec.get("time") and device == "cuda":
            inputs = ref_inputs[SEEDS[0]]
            with torch.no_grad():
                row["ms"] = time_call(lambda: reference(*inputs), spec["reps"])
        emit(**row)
    except Exception as exc:  # the task itself is broken: nothing else can be checked
        emit(**base, candidate="(reference)", expect="-", status="FAIL",
             detail=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        return

    for index, cand_path in enumerate(spec["candidates"]):
        source = Path(cand_path).read_text()
        verdict, faster = expectation(source)
        name = Path(cand_path).name
        row = dict(base, candidate=name, expect=(verdict or "?") + (" faster" if faster else ""))
        if verdict not in VERDICTS:
            emit(**row, status="FAIL", detail="no valid `# cudal1: expect=...` first line")
            continue
        if uses_cuda(source) and device != "cuda":
            emit(**row, status="SKIP", detail="builds CUDA code or Triton kernels; run with --device cuda on a GPU machine")
            continue
        # The reference module's globals are restored before every candidate, as the runner does.
        vars(ref_mod).clear()
        vars(ref_mod).update(snapshot)
        stage = "load"
        outcome, detail, cand_ms = None, "", None
        try:
            cand_mod = load_module(cand_path, f"cudal1_check_candidate_{index}")
            stage = "construct"
            if not hasattr(cand_mod, "ModelNew"):
                raise AttributeError("the candidate defines no ModelNew")
            seed_all(INIT_SEED)
            model = cand_mod.ModelNew(*init).to(device).eval()
            stage = "forward"
            signs, differences = [], []
            for call, seed in enumerate(SEEDS):
                inputs = make_inputs(seed)
                clones = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
                signal.alarm(first_timeout if call == 0 else timeout)
                try:
                    with torch.no_grad():
                        out = flatten(model(*inputs))
                    if device == "cuda":
                        torch.cuda.synchronize()
                finally:
                    signal.alarm(0)
                signs += findings(out, inputs, clones)
                diff = compare(ref_outs[seed], out, tol)
                if diff:
                    differences.append(f"seed {seed}: {diff}")
            if signs:
                outcome, detail = "exploit", "; ".join(dict.fromkeys(signs))
            elif differences:
                outcome, detail = "incorrect", differences[0]
            else:
                outcome, detail = "correct", f"matches on seeds {list(SEEDS)} (tol {tol:g})"
                if spec.get("time") and device == "cuda":
                    inputs = make_inputs(SEEDS[0])
                    with torch.no_grad():
                        cand_ms = time_call(lambda: model(*inputs), spec["reps"])
        except CallTimeout as exc:
            outcome, detail = "timeout", f"{stage}: {exc} ({timeout} s)"
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            if "Ninja is required" in text or "ninja" in text.lower() and "not found" in text.lower():
                emit(**row, status="SKIP", detail="load_inline needs ninja, which is not installed")
                continue
            if stage == "load" and "Error building extension" in text:
                outcome = "compile_error"
            else:
                outcome = "runtime_error"
            detail = f"{stage}: {text.splitlines()[0][:300]}"
        finally:
            if device == "cuda":
                torch.cuda.empty_cache()
        status = "PASS" if outcome == verdict else "FAIL"
        if status == "FAIL":
            detail = f"got {outcome}: {detail}"
        result = dict(row, status=status, detail=detail)
        if cand_ms is not None:
            result["ms"] = cand_ms
        emit(**result)


# ----------------------------------------------------------------------------------------------
# Parent


def build_extensions(jobs: list[dict], parallel: int, env: dict) -> None:
    """Imports every CUDA candidate once, in parallel, so that the checks find built extensions."""
    paths = [c for j in jobs for c in j["candidates"] if uses_cuda(Path(c).read_text())]
    if not paths:
        return
    print(f"building {len(paths)} CUDA candidates, {parallel} at a time ...", flush=True)
    code = "import importlib.util,sys;s=importlib.util.spec_from_file_location('b',sys.argv[1]);m=importlib.util.module_from_spec(s);s.loader.exec_module(m)"

    def one(path):
        t0 = time.time()
        p = subprocess.run([sys.executable, "-c", code, path], env=env, capture_output=True, text=True)
        return path, p.returncode, time.time() - t0, p.stderr[-3000:]

    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        for path, rc, secs, err in pool.map(one, paths):
            state = "ok" if rc == 0 else "FAILED"
            print(f"  {state:6} {secs:5.1f} s  {Path(path).relative_to(ROOT)}", flush=True)
            if rc != 0 and "expect=compile_error" not in Path(path).read_text().splitlines()[0]:
                print(err, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--suite", choices=["all", "corpus", "cpu"], default="all")
    ap.add_argument("--only", action="append",
                    help="check only tasks whose `suite:levelN/stem` contains this text (repeatable)")
    ap.add_argument("--cuda-tasks", action="store_true", help="only tasks that have a CUDA candidate")
    ap.add_argument("--full", action="store_true", help="full task sizes even on the CPU (slow)")
    ap.add_argument("--time", action="store_true", help="with --device cuda, time reference and correct candidates")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--jobs", "-j", type=int, default=2, help="tasks checked at once")
    ap.add_argument("--build-jobs", type=int, default=8, help="CUDA candidates built at once (--device cuda)")
    ap.add_argument("--call-timeout", type=int, default=10, help="seconds one forward call may take")
    ap.add_argument("--load-timeout", type=int, default=300, help="seconds a candidate's first forward call may take (build time)")
    ap.add_argument("--task-timeout", type=int, default=900, help="seconds one task's worker may take")
    ap.add_argument("--json", help="also write every result row to this JSON-lines file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        run_worker(json.loads(args.worker))
        return 0

    suites = ["corpus", "cpu"] if args.suite == "all" else [args.suite]
    jobs = discover(suites, args.only, args.cuda_tasks)
    if not jobs:
        print("no tasks matched", file=sys.stderr)
        return 1
    env = dict(os.environ)
    # torch's load_inline runs `ninja`; a virtualenv's bin is not on PATH unless activated.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("MAX_JOBS", "2")
    # Extensions build into the repository's ignored .cudal1/ folder unless the caller chose a place.
    env.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cudal1" / "torch_extensions"))
    if args.device == "cuda":
        build_extensions(jobs, args.build_jobs, env)

    rows: list[dict] = []
    missing_small = []

    def run(job):
        spec = dict(job, device=args.device, call_timeout=args.call_timeout, load_timeout=args.load_timeout, time=args.time, reps=args.reps)
        if args.device == "cpu" and job["suite"] == "corpus" and not args.full:
            if job["key"] not in SMALL:
                missing_small.append(job["key"])
                return [dict(suite=job["suite"], task=job["key"], candidate="(reference)", expect="-",
                             status="FAIL", detail="no entry in SMALL for a CPU run")]
            spec["overrides"] = SMALL[job["key"]]
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.task_timeout)
        except subprocess.TimeoutExpired:
            return [dict(suite=job["suite"], task=job["key"], candidate="(worker)", expect="-", status="FAIL",
                         detail=f"worker exceeded {args.task_timeout} s")]
        out = []
        for line in p.stdout.splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        seen = {r["candidate"] for r in out}
        for c in job["candidates"]:
            if Path(c).name not in seen:
                out.append(dict(suite=job["suite"], task=job["key"], candidate=Path(c).name, expect="?",
                                status="FAIL", detail=f"worker died (exit {p.returncode}): {p.stderr[-500:]}"))
        if "(reference)" not in seen:
            out.insert(0, dict(suite=job["suite"], task=job["key"], candidate="(reference)", expect="-",
                               status="FAIL", detail=f"worker died (exit {p.returncode}): {p.stderr[-500:]}"))
        return out

    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for result in pool.map(run, jobs):
            for r in result:
                rows.append(r)
                ms = f"{r['ms']:8.3f} ms" if "ms" in r else ""
                print(f"{r['status']:4}  {r['suite']:6} {r['task']:42} {r['candidate']:16} "
                      f"{r['expect']:20} {ms} {r['detail']}", flush=True)

    if args.json:
        with open(args.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("PASS", "FAIL", "SKIP")}
    if args.time and args.device == "cuda":
        print("\ntimings (median ms, CUDA events, same inputs each rep):")
        by_task: dict[str, dict[str, float]] = {}
        for r in rows:
            if "ms" in r:
                by_task.setdefault(f"{r['suite']}:{r['task']}", {})[r["candidate"]] = r["ms"]
        for task, times in by_task.items():
            ref = times.get("(reference)")
            parts = [f"{c}={t:.3f}" + (f" ({ref / t:.2f}x)" if ref and c != "(reference)" else "") for c, t in times.items()]
            print(f"  {task:50} " + "  ".join(parts))
    print(f"\n{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
