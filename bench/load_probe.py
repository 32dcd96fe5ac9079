"""Where a runner's `load` request spends its time: the reference role and the candidate role
load TASK (and CANDIDATE) in this process under cProfile, twice each (the second time shows what
is paid once per process).

    PYTHONPATH=python python3 bench/load_probe.py TASK CANDIDATE [--device cuda] [--top 25]
"""

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("task")
    p.add_argument("candidate")
    p.add_argument("--device", default="cuda")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--role", action="append", choices=["reference", "candidate"])
    a = p.parse_args()
    t0 = time.perf_counter()
    import torch  # noqa: F401

    from cudal1_runner.session import Session

    print(json.dumps({"import_s": round(time.perf_counter() - t0, 3)}))
    for role in a.role or ["reference", "candidate"]:
        s = Session(role)
        request = {"reference": os.path.abspath(a.task), "device": a.device, "init_seed": 42}
        if role == "candidate":
            request["candidate"] = os.path.abspath(a.candidate)
        for attempt in (1, 2):
            prof = cProfile.Profile()
            t = time.perf_counter()
            prof.enable()
            reply = s._op_load(dict(request))
            prof.disable()
            wall = time.perf_counter() - t
            print(json.dumps({"role": role, "attempt": attempt, "wall_s": round(wall, 3), "load_ms": reply["load_ms"]}))
            if attempt == 1:
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(a.top)
                print(out.getvalue())
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            s._op_outputs({"seeds": [1], "dir": d, "share_bytes": 0})
            print(json.dumps({"role": role, "first_outputs_s": round(time.perf_counter() - t, 3)}))


if __name__ == "__main__":
    sys.exit(main())
