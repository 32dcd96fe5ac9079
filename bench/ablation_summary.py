"""Markdown tables of an ablation's runs (bench/gpu_ablation.sh's RUNS directory), for records:
per seed and arm, the held-out summary after the self-supervised stage (step 0) and at every
held-out step of the RL runs; the train curves of the RL runs in windows of steps; and per
held-out task, each arm's samples at its last evaluation.
    python3 bench/ablation_summary.py RUNS [--window 10] > summary.md
Reads only what the runs wrote (heldout-*.json, <arm>/heldout.jsonl, <arm>/metrics.jsonl); a run
cut before its last evaluation shows what it has.
"""

import argparse
import glob
import json
import math
import os
import statistics


def lines(path):
    if not os.path.isfile(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def pct(x):
    return "-" if x is None else f"{100 * x:.0f}"


def num(x, digits=3):
    return "-" if x is None else f"{x:.{digits}f}"


def median_of(summary, key):
    v = summary.get(key)
    return v.get("median") if isinstance(v, dict) else v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("--window", type=int, default=10)
    a = ap.parse_args()
    seeds = sorted(glob.glob(os.path.join(a.runs, "seed-*")), key=lambda d: int(d.rsplit("-", 1)[1]))
    arms = ["rl", "control"]

    print("## Held-out during RL, per seed (step 0 = the self-supervised checkpoint)\n")
    print("| seed | arm | step | correct % | fast_1 % | geomean (correct) | best-of-G geomean | unseen: correct % | unseen: geomean |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for d in seeds:
        s = os.path.basename(d)
        start = os.path.join(d, "heldout-self-sup.json")
        for arm in arms:
            rows = []
            if os.path.isfile(start):
                summary = json.load(open(start))["summary"]
                rows.append((0, {k: median_of(summary, k) for k in ("correct_rate", "fast1_rate", "geomean_speedup_of_correct", "best_of_g_geomean")}, {}))
            for h in lines(os.path.join(d, arm, "heldout.jsonl")):
                rows.append((h["step"], h, h.get("unseen families") or {}))
            for step, h, unseen in rows:
                print(f"| {s} | {arm} | {step} | {pct(h.get('correct_rate'))} | {pct(h.get('fast1_rate'))} "
                      f"| {num(h.get('geomean_speedup_of_correct'))} | {num(h.get('best_of_g_geomean'))} "
                      f"| {pct(unseen.get('correct_rate'))} | {num(unseen.get('geomean_speedup_of_correct'))} |")

    print(f"\n## Train curves: means over windows of {a.window} RL steps\n")
    print("Reward is the arm's own (speedup for rl, 1 per correct sample for control); fast_1 counts")
    print("correct samples above 1.00x; updates: steps with a group that carried signal.\n")
    print("| seed | arm | steps | reward | correct % | fast_1 % | best speedup (max) | updates | samples/step | s/step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for d in seeds:
        s = os.path.basename(d)
        for arm in arms:
            m = lines(os.path.join(d, arm, "metrics.jsonl"))
            for i in range(0, len(m), a.window):
                w = m[i:i + a.window]
                mean = lambda k: statistics.mean(x.get(k) or 0 for x in w)
                best = max((x.get("best_speedup") or 0) for x in w)
                updates = sum(1 for x in w if (x.get("updates") or 0) > 0)
                sec = statistics.mean((x.get("seconds") or {}).get("step") or 0 for x in w)
                print(f"| {s} | {arm} | {w[0]['step']}-{w[-1]['step']} | {mean('reward_mean'):.3f} | {pct(mean('correct_rate'))} "
                      f"| {pct(mean('fast1_rate'))} | {best:.2f} | {updates} | {mean('samples'):.1f} | {sec:.1f} |")

    print("\n## Per held-out task: each arm's last evaluation, all seeds\n")
    print("A cell lists a seed's samples: the speedup of a correct one, else its verdict (`trunc`:")
    print("no program within the token limit); seeds separated by `/`.\n")
    reports = {}
    for d in seeds:
        for f in glob.glob(os.path.join(d, "heldout-*.json")):
            arm = os.path.basename(f)[len("heldout-"):-len(".json")]
            reports.setdefault(arm, {})[os.path.basename(d)] = json.load(open(f))["samples"]
    order = [x for x in ["base", "sft", "self-sup", "rl", "control"] if x in reports]
    tasks = sorted({x["task"] for r in reports.values() for ss in r.values() for x in ss},
                   key=lambda t: int(t.split("/")[1].split("_")[0]))
    print("| task | " + " | ".join(order) + " |")
    print("| --- | " + " | ".join("---" for _ in order) + " |")

    def cell(x):
        if x.get("correct") and x.get("speedup") is not None:
            sp = x["speedup"]
            return f"**{sp:.0f}x**" if sp >= 10 else f"{sp:.2f}"
        if x.get("truncated"):
            return "trunc"
        return x.get("verdict") or "no program"

    for t in tasks:
        cells = []
        for arm in order:
            per_seed = []
            for s in sorted(reports[arm], key=lambda k: int(k.rsplit("-", 1)[1])):
                xs = [x for x in reports[arm][s] if x["task"] == t]
                per_seed.append(", ".join(cell(x) for x in xs))
            cells.append(" / ".join(per_seed))
        print(f"| {t.split('/')[1]} | " + " | ".join(cells) + " |")

    # The geometric mean over every correct held-out sample of each arm, pooled over seeds.
    print("\n| arm | seeds | correct samples | pooled geomean of correct |")
    print("| --- | --- | --- | --- |")
    for arm in order:
        sp = [x["speedup"] for r in reports[arm].values() for x in r if x.get("correct") and x.get("speedup")]
        g = math.exp(statistics.mean(math.log(v) for v in sp)) if sp else None
        print(f"| {arm} | {len(reports[arm])} | {len(sp)} | {num(g)} |")


if __name__ == "__main__":
    main()
