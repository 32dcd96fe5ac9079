"""Where does the between-process noise of a speedup come from? (issue 2b, GPU only)

Emulates cudal1's timing protocol without cudal1: a parent starts two fresh worker processes that
run the SAME operation (true speedup 1.0), times them in interleaved blocks in random order, and
reports the ratio of their medians. Many such pairs per condition show the spread between process
pairs; conditions switch one suspected cause at a time:

  free     nothing pinned (as cudal1 is today)
  pin      both workers' main threads on one fixed core
  pin2     each worker on its own fixed core
  spin     a short GPU spin queued before the start event (the window then holds GPU time only)
  replace  before each block, the caching allocator is emptied and a spacer of random size is
           allocated, so each block's tensors sit on different memory
  pre      the end event is recorded before the device-wide synchronisation (misses side streams:
           shows how much of the noise is the synchronisation's round trip)
  noaslr   workers start without address-space randomisation (setarch -R)
  busy     a ~100 us GPU spin before each call's synchronisation (untimed), so the GPU is not idle
           most of the time between tiny calls
Flags combine with '+': gelu:pin+pre.

Usage: python3 bench/noise_probe.py [--pairs 8] [--budget 2] gelu:free gelu:pin matmul:replace ...
Prints one JSON line per pair and a summary line per condition.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

OPS = ("gelu", "softmax", "matmul")


def worker(op: str, mode: str, core: int) -> None:
    import torch

    flags = set(mode.split("+"))
    if flags & {"pin", "pin2"}:
        os.sched_setaffinity(0, {core})
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device=dev)
    flush = torch.empty(2 * torch.cuda.get_device_properties(dev).L2_cache_size // 4, dtype=torch.int32, device=dev)
    shape = {"gelu": [(1 << 20,)], "softmax": [(8192, 8192)], "matmul": [(4096, 4096), (4096, 4096)]}[op]
    fn = {
        "gelu": lambda x: torch.nn.functional.gelu(x),
        "softmax": lambda x: torch.softmax(x, dim=1),
        "matmul": lambda a, b: a @ b,
    }[op]
    spacer = None
    for line in sys.stdin:
        req = json.loads(line)
        if "replace" in flags:
            spacer = None
            torch.cuda.empty_cache()
            spacer = torch.empty(random.randrange(1, 64) * (2 << 20), dtype=torch.uint8, device=dev)
        ms = []
        for i in range(req["calls"]):
            gen.manual_seed(req["seed"] + i)
            args = [torch.randn(s, generator=gen, device=dev) for s in shape]
            flush.fill_(i)
            if "busy" in flags:
                torch.cuda._sleep(200_000)
            torch.cuda.synchronize()
            if "spin" in flags:
                torch.cuda._sleep(200_000)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*args)
            if "pre" in flags:
                end.record()
                torch.cuda.synchronize()
            else:
                torch.cuda.synchronize()
                end.record()
            ms.append((start, end))
            del out, args
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in ms]
        cpu = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[36])
        print(json.dumps({"ms": times, "cpu": cpu, "t": time.time()}), flush=True)


class Worker:
    def __init__(self, op, mode, core):
        prefix = ["setarch", os.uname().machine, "-R"] if "noaslr" in mode.split("+") else []
        self.p = subprocess.Popen(
            prefix + [sys.executable, __file__, "--worker", op, mode, str(core)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )

    def block(self, calls, seed):
        self.p.stdin.write(json.dumps({"calls": calls, "seed": seed}) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def pair(op, mode, budget, cores, block_s):
    a, b = Worker(op, mode, cores[0]), Worker(op, mode, cores[1] if "pin2" in mode else cores[0])
    try:
        # warm-up and block sizing: ~100 ms blocks
        for w in (a, b):
            w.block(3, 1)
        t = time.perf_counter()
        a.block(20, 2)
        per = (time.perf_counter() - t) / 20
        calls = max(1, min(1000, int(block_s / per)))
        for w in (a, b):
            w.block(calls, 3)
        sa, sb, cpus, blocks, stamps = [], [], set(), {id(a): [], id(b): []}, {id(a): [], id(b): []}
        started = time.perf_counter()
        rounds = 0
        while rounds < 5 or time.perf_counter() - started < budget:
            order = [(a, sa), (b, sb)]
            random.shuffle(order)
            for w, acc in order:
                r = w.block(calls, random.randrange(1 << 40))
                acc.extend(r["ms"])
                blocks[id(w)].append(round(1000 * statistics.median(r["ms"]), 1))
                stamps[id(w)].append(round(r["t"], 3))
                cpus.add(r["cpu"])
            rounds += 1
        ma, mb = statistics.median(sa), statistics.median(sb)
        return {"op": op, "mode": mode, "ratio": ma / mb, "a_ms": ma, "b_ms": mb, "calls": len(sa), "cpus": sorted(cpus),
                "a_block_us": blocks[id(a)], "b_block_us": blocks[id(b)],
                "a_block_end": stamps[id(a)], "b_block_end": stamps[id(b)]}
    finally:
        a.close()
        b.close()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--budget", type=float, default=2.0)
    ap.add_argument("--block", type=float, default=0.1, help="seconds per block")
    ap.add_argument("--core", type=int, action="append", help="the core(s) to pin to (default: the middle ones)")
    ap.add_argument("conditions", nargs="+")
    args = ap.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    cores = tuple(args.core) if args.core else (allowed[len(allowed) // 2], allowed[len(allowed) // 2 + 1])
    if len(cores) == 1:
        cores = (cores[0], cores[0])
    for cond in args.conditions:
        op, mode = cond.split(":")
        assert op in OPS, op
        ratios = []
        for _ in range(args.pairs):
            r = pair(op, mode, args.budget, cores, args.block)
            r["block_s"] = args.block
            print(json.dumps(r), flush=True)
            ratios.append(r["ratio"])
        print(json.dumps({"summary": cond, "cores": cores, "spread_pct": 100 * (max(ratios) / min(ratios) - 1),
                          "stdev_pct": 100 * statistics.stdev(ratios), "ratios": [round(x, 4) for x in ratios]}), flush=True)


if __name__ == "__main__":
    main()
