"""What a reference costs per task: a fresh runner's start and `load` against a `load` in a runner
kept from the task before (correctness checks reuse a lane's oldest reference this way).

    python3 bench/reuse_probe.py PYTHON TASK.py [TASK.py ...]   # from the repository root
"""
import json, subprocess, sys, time, os
py = sys.argv[1]; tasks = sys.argv[2:]
env = dict(os.environ, PYTHONPATH="python", PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
def start():
    return subprocess.Popen([py, "-m", "cudal1_runner", "--role", "reference"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
def call(p, req):
    p.stdin.write((json.dumps(req) + "\n").encode()); p.stdin.flush()
    return json.loads(p.stdout.readline())
fresh = []
for t in tasks:
    t0 = time.perf_counter(); p = start(); call(p, {"id": 1, "op": "hello"}); call(p, {"id": 2, "op": "load", "reference": os.path.abspath(t), "device": "cpu", "init_seed": 42}); fresh.append(time.perf_counter() - t0)
    call(p, {"id": 3, "op": "shutdown"}); p.wait()
p = start(); call(p, {"id": 1, "op": "hello"})
reused = []
for i, t in enumerate(tasks):
    t0 = time.perf_counter(); r = call(p, {"id": 10 + i, "op": "load", "reference": os.path.abspath(t), "device": "cpu", "init_seed": 42}); reused.append(time.perf_counter() - t0)
print("fresh start+load per task:", [round(x, 2) for x in fresh])
print("load in a kept process:   ", [round(x, 2) for x in reused])
