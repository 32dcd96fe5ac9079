"""Eager time of every reference in a suite, on one GPU (issue 3: each between 1 and 15 ms).

The protocol follows the evaluator's: weights from a fixed seed, inputs drawn on the device, fresh
input contents for every timed call, L2 flushed before each call, a device-wide synchronisation
before the clock stops. It prints one JSON row per task and a line per task out of the range.
It exists because a batch measures a reference only when a candidate for it is evaluated.

usage: python bench/eager_times.py SUITE_DIR [--calls 30] [--json OUT] [--device cuda]
"""

import argparse
import glob
import importlib.util
import json
import os
import statistics
import time

import torch


def load(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def on_device(values, device):
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def eager_ms(mod, device, calls):
    torch.manual_seed(0)
    with torch.device(device):
        model = mod.Model(*mod.get_init_inputs()).to(device).eval()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    times = []
    with torch.no_grad():
        for i in range(calls + 3):
            torch.manual_seed(1000 + i)
            with torch.device(device):
                inputs = on_device(mod.get_inputs(), device)
            flush.zero_()
            sync(device)
            start = time.perf_counter_ns()
            model(*inputs)
            sync(device)
            if i >= 3:  # the first calls warm up
                times.append((time.perf_counter_ns() - start) / 1e6)
            del inputs
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("suite")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--json")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    device = torch.device(args.device)
    # As the evaluator runs every program: full fp32, no TF32 (PyTorch's default allows it in cuDNN).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    rows = []
    for path in sorted(glob.glob(os.path.join(args.suite, "level*", "*.py"))):
        task = os.path.relpath(path, args.suite)[:-3]
        try:
            times = eager_ms(load(path), device, args.calls)
            row = {"task": task, "median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
                   "calls": len(times), "gpu": gpu}
        except Exception as exc:  # one broken task must not hide the others' times
            row = {"task": task, "error": f"{type(exc).__name__}: {exc}", "gpu": gpu}
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    outside = [r for r in rows if "median_ms" in r and not 1.0 <= r["median_ms"] <= 15.0]
    for r in outside:
        print(f"outside 1-15 ms: {r['task']} {r['median_ms']:.3f} ms")
    print(f"{len(rows) - len(outside)} of {len(rows)} tasks within 1-15 ms on {gpu}")
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
