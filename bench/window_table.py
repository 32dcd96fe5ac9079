"""One line per evaluation of `cudal1 eval --json`: task, candidate, verdict, class, speedup,
window, spin and both sides' median times, and whether the `# cudal1: expect=` line was met."""
import json
import sys


def main(path):
    for line in open(path):
        row = json.loads(line)
        if "verdict" not in row:
            if "summary" in row or "counts" in row:
                print("summary:", json.dumps(row.get("summary", row).get("counts", {})))
            continue
        m = row.get("measurements") or {}
        t = m.get("timing") or {}
        window = t.get("window") or {}
        sp = row.get("speedup") or {}
        expect = row.get("expect") or {}
        print(
            f"{row.get('task', '?')[-24:]:24} {str(row.get('candidate', row.get('label', '?')))[-34:]:34} "
            f"{row['verdict']:13} {str(row.get('reason_class', '')):22} "
            f"x{sp.get('median', float('nan')):7.3f} [{sp.get('ci_low', float('nan')):.3f}, {sp.get('ci_high', float('nan')):.3f}] "
            f"window={window.get('kind', '-')} spin_us={t.get('spin_us')} "
            f"ref_ms={row.get('ref_ms')} cand_ms={row.get('candidate_ms')} expect={expect.get('verdict', '-')}{' no_gain' if expect.get('no_gain') else ''}"
        )


if __name__ == "__main__":
    main(sys.argv[1])
