"""Build time inside the GPU's slot over a stored batch (issue 12's "time the GPU slots spent
waiting on builds"), from the store alone:

    python3 bench/release_share.py STORE.db BATCH_ID

A full-mode job holds its device alone from the end of its `device_wait` phase to its verdict:
its slot time is the sum of the phases in between (reference, start, load, correctness, timing,
verdict). `measurements.extension_ms` is the time the candidate spent in extension builds in
that slot. Prints one JSON line: rows, rows with code that ran, slot and build seconds, the share,
and the rows that built for more than a second in the slot.
"""

import json
import sqlite3
import sys

SLOT_PHASES = ("reference", "start", "load", "correctness", "timing", "verdict")


def main() -> None:
    store, batch = sys.argv[1], sys.argv[2]
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    rows = db.execute(
        "select e.task_name, e.verdict, e.measurements, e.created_at from batch_evaluations b "
        "join evaluations e on e.id = b.evaluation_id where b.batch_id = ?",
        (batch,),
    ).fetchall()
    slot = build = 0.0
    ran = 0
    large = []
    for task, verdict, measurements, created in rows:
        m = json.loads(measurements).get("measurements", {})
        phases = m.get("phases_ms") or {}
        s = sum(phases.get(p, 0.0) for p in SLOT_PHASES)
        ext = m.get("extension_ms") or 0.0
        ran += s > 0
        slot += s
        build += ext
        if ext > 1000:
            large.append({"task": task, "verdict": verdict, "extension_s": round(ext / 1e3, 1), "judged": created})
    print(json.dumps({
        "batch": batch,
        "rows": len(rows),
        "rows_that_ran": ran,
        "slot_s": round(slot / 1e3, 1),
        "build_in_slot_s": round(build / 1e3, 2),
        "build_share": round(build / slot, 6) if slot else None,
        "rows_building_over_1s": sorted(large, key=lambda r: -r["extension_s"]),
    }))


if __name__ == "__main__":
    main()
