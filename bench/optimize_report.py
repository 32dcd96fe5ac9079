"""Table of a `cudal1 optimize --json` run over a suite: per task and round, the samples, the
correct ones and the best speedup so far; says whether the best improved in every round.

usage: python optimize_report.py OPTIMIZE.jsonl
"""
import json
import sys


def main(path):
    runs = [json.loads(l) for l in open(path) if l.strip()]
    print("| task | round | samples | valid | correct | best speedup so far |")
    print("| --- | --- | --- | --- | --- | --- |")
    improving = True
    for run in runs:
        bests = []
        for r in run["rounds"]:
            best = r.get("best_speedup")
            bests.append(best)
            shown = f"{best:.3f}x" if best is not None else "none"
            print(f"| {run['task']} | {r['round']} | {r['samples']} | {r['valid']} | {r['correct']} | {shown} |")
        ok = len(bests) >= 2 and all(b is not None for b in bests) and all(a < b for a, b in zip(bests, bests[1:]))
        improving &= ok
        print(f"| {run['task']} | stop: {run['stop_text']} | | | | {'improved every round' if ok else 'did NOT improve every round'} |")
    print(f"\nrounds improving on every task: {improving}")
    return 0 if improving else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
