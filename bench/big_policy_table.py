"""The table of bench/gpu_big_policy.sh: per configuration (a `cudal1 train rl` run directory),
seconds per step split into generate, evaluate and train, tokens generated per second and the
policy worker's peak memory, from the run's metrics.jsonl.

    python3 bench/big_policy_table.py OUT.json OUT.md NAME=DIR[:NOTE] ...

DIR is a run directory, or holds one named `run`.

Every step is listed; the summary row of a configuration is the median over its steps after the
first (the first step also pays the CUDA context's and allocator's warm-up and the first graph
capture), or its only step. `nvidia-smi.csv` in a run directory (written beside the run by the
script: `index, memory.used` MiB samples) adds the most any GPU showed, the evaluator's processes
and the CUDA contexts included. `policy.txt` there (the `policy loaded` log line) adds the
parameter counts.
"""

import json
import os
import re
import statistics
import sys

GIB = 1 << 30


def steps_of(run):
    """The metrics of the run directory `run`, or of `run/run` (gpu_big_policy.sh's layout: the
    run directory beside the configuration's logs)."""
    path = os.path.join(run, "run", "metrics.jsonl")
    if not os.path.isfile(path):
        path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def nvidia_smi_peaks(run):
    """{gpu index: most MiB used} from the samples taken during the run."""
    path = os.path.join(run, "nvidia-smi.csv")
    peaks = {}
    if os.path.isfile(path):
        for line in open(path):
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                peaks[int(parts[0])] = max(peaks.get(int(parts[0]), 0), int(parts[1]))
    return peaks


def parameters(run):
    path = os.path.join(run, "policy.txt")
    if not os.path.isfile(path):
        return {}
    text = open(path).read()
    out = {}
    for key in ("parameters", "trainable"):
        m = re.search(rf"\b{key}[=:]\s*(\d+)", text)
        if m:
            out[key] = int(m.group(1))
    return out


def row(m):
    s = m.get("seconds", {})
    mem = m.get("peak_memory") or {}
    gib = lambda v: None if v is None else v / GIB  # noqa: E731
    return {
        "step": m.get("step"),
        "generate_s": s.get("generate"),
        "evaluate_s": s.get("evaluate"),
        "train_s": s.get("train"),
        "generate_next_s": s.get("generate_next"),
        "step_s": s.get("step"),
        "generated_tokens": m.get("generated_tokens"),
        "prompt_tokens_mean": (m.get("prompt_tokens") or {}).get("mean"),
        "prompt_tokens_max": (m.get("prompt_tokens") or {}).get("max"),
        "tokens_per_s": m.get("generate_tokens_per_s"),
        "trained_tokens": m.get("tokens"),
        "updates": m.get("updates"),
        "sampled_ahead": m.get("sampled_ahead"),
        "decoder": m.get("decoder"),
        "memory_measure": mem.get("measure"),
        "memory_device": mem.get("device"),
        "generate_peak_gib": gib(mem.get("generate_bytes")),
        "train_peak_gib": gib(mem.get("train_bytes")),
        "reserved_gib": gib(mem.get("reserved_bytes")),
        "device_gib": gib(mem.get("total_bytes")),
    }


NUMERIC = ("generate_s", "evaluate_s", "train_s", "generate_next_s", "step_s", "generated_tokens",
           "prompt_tokens_mean", "prompt_tokens_max",
           "tokens_per_s", "trained_tokens", "generate_peak_gib", "train_peak_gib", "reserved_gib")


def summary(rows):
    use = rows[1:] if len(rows) > 1 else rows
    out = {"steps_in_median": [r["step"] for r in use]}
    for k in NUMERIC:
        vals = [r[k] for r in use if isinstance(r.get(k), (int, float))]
        out[k] = statistics.median(vals) if vals else None
    # Memory peaks: the most over every step, the first included.
    for k in ("generate_peak_gib", "train_peak_gib", "reserved_gib"):
        vals = [r[k] for r in rows if isinstance(r.get(k), (int, float))]
        out[k] = max(vals) if vals else None
    out["decoder"] = next((r["decoder"] for r in rows if r.get("decoder")), None)
    return out


def fmt(v, digits=2):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    out_json, out_md, specs = argv[0], argv[1], argv[2:]
    configs = []
    for spec in specs:
        name, _, rest = spec.partition("=")
        run, _, note = rest.partition(":")
        rows = [row(m) for m in steps_of(run)]
        configs.append({"name": name, "run": run, "note": note, "rows": rows,
                        "summary": summary(rows) if rows else None,
                        "nvidia_smi_peak_mib": nvidia_smi_peaks(run), **parameters(run)})
    with open(out_json, "w") as f:
        json.dump({"configs": configs}, f, indent=1)
    lines = [
        "| config | steps | generate s | evaluate s | train s | step s | tokens/step | tokens/s "
        "| prompt tokens (mean) | peak GiB generate | peak GiB train | reserved GiB "
        "| nvidia-smi MiB (max per GPU) | trainable |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in configs:
        s = c["summary"]
        if s is None:
            lines.append(f"| {c['name']} | 0 | no step finished ({c['note'] or 'see the log'}) |" + " |" * 11)
            continue
        smi = ", ".join(f"{i}: {v:,}" for i, v in sorted(c["nvidia_smi_peak_mib"].items())) or "-"
        lines.append(
            f"| {c['name']} | {len(c['rows'])} | {fmt(s['generate_s'])} | {fmt(s['evaluate_s'], 3)} "
            f"| {fmt(s['train_s'])} | {fmt(s['step_s'])} | {fmt(s['generated_tokens'], 0)} "
            f"| {fmt(s['tokens_per_s'], 0)} | {fmt(s['prompt_tokens_mean'], 0)} "
            f"| {fmt(s['generate_peak_gib'])} | {fmt(s['train_peak_gib'])} "
            f"| {fmt(s['reserved_gib'])} | {smi} | {fmt(c.get('trainable'))} |")
    lines += ["", "Per step (step 1 includes warm-up; the summary is the median of the later steps, "
              "memory the most of any step):", "",
              "| config | step | generate s | evaluate s | train s | generate next s | step s "
              "| tokens | tokens/s | trained tokens | updates | ahead | decoder | GiB gen | GiB train | GiB reserved |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in configs:
        for r in c["rows"]:
            lines.append(
                f"| {c['name']} | {r['step']} | {fmt(r['generate_s'])} | {fmt(r['evaluate_s'], 3)} "
                f"| {fmt(r['train_s'])} | {fmt(r['generate_next_s'])} | {fmt(r['step_s'])} "
                f"| {fmt(r['generated_tokens'])} | {fmt(r['tokens_per_s'], 0)} | {fmt(r['trained_tokens'])} "
                f"| {fmt(r['updates'])} | {fmt(r['sampled_ahead'])} | {fmt(r['decoder'])} "
                f"| {fmt(r['generate_peak_gib'])} | {fmt(r['train_peak_gib'])} | {fmt(r['reserved_gib'])} |")
    notes = [f"- {c['name']}: {c['note']}" for c in configs if c["note"]]
    if notes:
        lines += ["", *notes]
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
