"""Stamps `cudal1 eval --json` rows as they arrive: one tab-separated line per row, the seconds
since START (a Unix time), the row's verdict, its task, and its phases in seconds (queue, compile,
device wait, start, load, reference, correctness, ...). A run's timeline, for where its wall time
went between the command's start, the first and last verdicts, and its exit.

    cudal1 eval ... --json | python3 bench/stamp_rows.py START > NAME.stamps
"""

import json
import sys
import time


def main() -> None:
    start = float(sys.argv[1])
    for line in sys.stdin:
        at = time.time() - start
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "verdict" not in r:
            print(f"{at:.3f}\tsummary", flush=True)
            continue
        phases = r.get("measurements", {}).get("phases_ms") or {}
        parts = " ".join(f"{k}={v / 1e3:.2f}" for k, v in phases.items())
        print(f"{at:.3f}\t{r['verdict']}\t{r.get('task')}\t{parts}", flush=True)


if __name__ == "__main__":
    main()
