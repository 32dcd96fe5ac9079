"""The baseline cudal1 is compared with: a plain serial loop in ONE process that, for each
candidate in turn, imports it (building its load_inline extensions), checks it on 5 seeds and
times it the way KernelBench's harness does (CUDA events on the current stream, the same inputs
for every trial, no L2 flush, no device-wide synchronisation before the end event).

usage: python serial_loop.py SUITE_DIR CANDIDATES_DIR [--trials 100] [--json OUT] [--shard K/N]
Candidates are laid out like cudal1's: CANDIDATES/levelN/<task stem>.py or .../<task stem>/*.py.
--shard K/N takes every N-th candidate from the K-th (0-based): a loop too long for one sitting
runs as N processes one after another, and its wall time is the sum of theirs.
"""

import argparse
import glob
import importlib.util
import json
import os
import sys
import time

import torch


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pairs(suite, cands):
    for task in sorted(glob.glob(os.path.join(suite, "level*", "*.py"))):
        level = os.path.basename(os.path.dirname(task))
        stem = os.path.splitext(os.path.basename(task))[0]
        base = os.path.join(cands, level, stem)
        files = ([base + ".py"] if os.path.isfile(base + ".py") else []) + sorted(glob.glob(os.path.join(base, "*.py")))
        for f in files:
            yield task, f


def time_events(model, inputs, trials):
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model(*inputs)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("suite")
    ap.add_argument("candidates")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--json")
    ap.add_argument("--shard", default="0/1")
    args = ap.parse_args()
    shard, shards = (int(x) for x in args.shard.split("/"))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    rows = []
    wall0 = time.perf_counter()
    timed_ms = 0.0
    for n, (task_path, cand_path) in enumerate(pairs(args.suite, args.candidates)):
        if n % shards != shard:
            continue
        t0 = time.perf_counter()
        row = {"task": task_path, "candidate": cand_path}
        try:
            task = load(task_path, f"task_{n}")
            cand = load(cand_path, f"cand_{n}")  # builds extensions here
            row["import_s"] = time.perf_counter() - t0
            init = task.get_init_inputs()
            torch.manual_seed(42)
            ref = task.Model(*init).to(dev).eval()
            torch.manual_seed(42)
            new = cand.ModelNew(*init).to(dev).eval()
            ok = True
            with torch.no_grad():
                for seed in range(5):
                    torch.manual_seed(seed)
                    inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
                    if not torch.allclose(ref(*inputs), new(*inputs), atol=1e-2, rtol=1e-2):
                        ok = False
                        break
                row["correct"] = ok
                if ok:
                    torch.manual_seed(0)
                    inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
                    for _ in range(3):
                        ref(*inputs), new(*inputs)
                    torch.cuda.synchronize()
                    r = time_events(ref, inputs, args.trials)
                    c = time_events(new, inputs, args.trials)
                    timed_ms += sum(r) + sum(c)
                    row["ref_ms"] = sum(r) / len(r)
                    row["cand_ms"] = sum(c) / len(c)
                    row["speedup"] = row["ref_ms"] / row["cand_ms"]
        except Exception as e:  # the loop must go on, as a harness would
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        print(json.dumps(row), flush=True)
    wall = time.perf_counter() - wall0
    summary = {
        "candidates": len(rows),
        "wall_s": wall,
        "candidates_per_minute": len(rows) / wall * 60,
        "timed_share": timed_ms / 1e3 / wall,
        "timed_s": timed_ms / 1e3,
        "shard": args.shard,
    }
    print(json.dumps({"summary": summary}), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
