"""A batch from CUDA-L1's published kernels, laid out as a suite that any cudal1 version reads.

    python3 bench/cuda_l1_batch.py RELEASE.json OUT_DIR [--load-inline N] [--plain N]

RELEASE.json is CUDA-L1's `optimized_cuda_code/<gpu>.json` (fetched, never committed). OUT_DIR gets
`tasks/level<L>/<id>_cuda_l1.py` (each row's own reference) and `candidates.jsonl` (`{"task", "code"}`
rows). The batch takes N rows that build extensions with `load_inline`/`load`, spread over where
they build (at import, in `__init__`, later: on the first call or in a helper), and N rows of plain
PyTorch, each in (level, id) order, so that the same command picks the same rows. `selection.json`
says which rows and where each builds.
"""

import argparse
import ast
import json
import os
import sys


def build_site(code: str) -> str:
    """Where the program's first extension build happens: module, init or later."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return "unparsable"
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            f = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call):
                name = child.func.attr if isinstance(child.func, ast.Attribute) else getattr(child.func, "id", None)
                if name in ("load_inline", "load") and ("cpp_extension" in code or name == "load_inline"):
                    found.append(function)
            visit(child, f)

    visit(tree, None)
    if not found:
        return "none"
    if None in found:
        return "module"
    if "__init__" in found:
        return "init"
    return "later"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("release")
    p.add_argument("out")
    p.add_argument("--load-inline", type=int, default=20)
    p.add_argument("--plain", type=int, default=20)
    a = p.parse_args(argv)
    rows = [json.loads(line) for line in open(a.release) if line.strip()]
    rows = [r for r in rows if r.get("custom_code") and r.get("ref_code")]
    rows.sort(key=lambda r: (r["level_id"], r["task_id"]))
    by_site = {}
    for r in rows:
        r["_site"] = "none" if "load_inline" not in r["custom_code"] and "cpp_extension" not in r["custom_code"] else build_site(r["custom_code"])
        by_site.setdefault(r["_site"], []).append(r)
    # Builders spread evenly over where they build, in (level, id) order within each kind.
    builders, kinds = [], [k for k in ("module", "init", "later") if by_site.get(k)]
    i = 0
    while len(builders) < a.load_inline and any(by_site.get(k) for k in kinds):
        k = kinds[i % len(kinds)]
        if by_site[k]:
            builders.append(by_site[k].pop(0))
        i += 1
    picked = builders + by_site.get("none", [])[: a.plain]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "candidates.jsonl"), "w") as cands:
        for r in picked:
            key = f"level{r['level_id']}/{r['task_id']}_cuda_l1"
            path = os.path.join(a.out, "tasks", key + ".py")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(r["ref_code"])
            cands.write(json.dumps({"task": key, "code": r["custom_code"]}) + "\n")
    selection = [{"task": f"level{r['level_id']}/{r['task_id']}_cuda_l1", "builds": r["_site"], "claimed": r.get("score_default")} for r in picked]
    with open(os.path.join(a.out, "selection.json"), "w") as f:
        json.dump(selection, f, indent=1)
    counts = {}
    for s in selection:
        counts[s["builds"]] = counts.get(s["builds"], 0) + 1
    print(json.dumps({"rows": len(picked), "builds": counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
