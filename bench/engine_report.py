"""Summarises `cudal1 eval --json` rows of a timed run (issue 12's benches).

    python3 bench/engine_report.py NAME ROWS.jsonl START END

Prints one JSON line: candidates finished, wall seconds, candidates per minute, verdicts, and
where the engine reports them (the summary line of the new engine): the share of the wall time the
GPU's timing slot was busy, and the time candidates spent inside extension builds while holding
it. Rows of a run cut short by its time limit count as far as they got; rows a resumed run took
from its store are counted apart.
"""

import json
import sys


def main() -> None:
    name, path, start, end = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
    rows, summary, reused = [], None, 0
    for line in open(path, errors="replace"):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "summary" in r:
            summary = r["summary"]
        elif r.get("verdict") and r.get("reused"):
            reused += 1  # judged by an earlier run (a resumed one): not this run's work
        elif r.get("verdict"):
            rows.append(r)
    wall = end - start
    verdicts = {}
    for r in rows:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    out = {
        "run": name,
        "candidates": len(rows),
        "wall_s": round(wall, 1),
        "candidates_per_minute": round(len(rows) / wall * 60, 2) if wall > 0 else None,
        "verdicts": verdicts,
        "duration_s_sum": round(sum(r.get("duration_ms", 0) for r in rows) / 1e3, 1),
    }
    if reused:
        out["reused_from_earlier_runs"] = reused
    ext = [r["measurements"].get("extension_ms") for r in rows if r["measurements"].get("extension_ms") is not None]
    if ext:
        out["extension_s_in_slot"] = round(sum(ext) / 1e3, 2)
        out["missed_builds"] = sum(1 for r in rows if r["measurements"].get("missed_builds"))
    load_inline = [r for r in rows if r["measurements"].get("compile_ms") is not None]
    if load_inline:
        out["load_phase_s_of_builders"] = round(sum(r["measurements"].get("phases_ms", {}).get("load", 0) for r in load_inline) / 1e3, 1)
    if summary and summary.get("engine"):
        busy = sum(d["s"] for d in summary["engine"]["timing_busy_s"])
        out["engine"] = summary["engine"]
        out["slot_busy_s"] = round(busy, 1)
        out["slot_busy_share"] = round(busy / wall, 3) if wall > 0 else None
        # Pipelined, builds happen in the shared phase, outside the slot's busy (timing) time.
        pipelined = any("device_wait_timing" in (r["measurements"].get("phases_ms") or {}) for r in rows)
        if ext and busy > 0 and not pipelined:
            out["build_share_of_slot"] = round(sum(ext) / 1e3 / busy, 4)
        if pipelined:
            out["pipelined"] = True
            waits = [r["measurements"]["phases_ms"].get("device_wait_timing", 0) for r in rows if r["measurements"].get("phases_ms")]
            out["mean_wait_to_time_s"] = round(sum(waits) / len(waits) / 1e3, 2) if waits else None
    print(json.dumps(out))


if __name__ == "__main__":
    main()
