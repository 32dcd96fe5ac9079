"""A chat-completions server that replays scripted replies, for benches of `cudal1 optimize` on
a machine with no LLM (the GPU machine has no network and no cargo, so the Rust test server
cannot be used there).

The script names, per task, the replies of each round. A request is matched to its task by the
reference program quoted in the prompt (the task whose lines it contains most), and the n-th
request for a task gets reply n % samples of round n // samples + 1: `cudal1 optimize` finishes a
round before it starts the next. A reply is a program file (sent as a fenced code block after a
short plan), `@reference` (the task itself with `Model` renamed `ModelNew`: about 1.0x), or
`@no_code` (prose without code). With `optimize --turns`, a task may name the replies of later
turns, `"turns": {"2": "fixed.py", "3": "@reference"}`: a refinement prompt ("Your previous
attempt (turn N)") gets the reply of turn N + 1 and does not count as a round's request. Every
request is logged as one JSON line (with `turn` and, for a refinement, `previous_verdict`: what
the prompt said the previous turn got).

usage: python scripted_llm.py SCRIPT.json --port PORT [--log FILE]
SCRIPT.json: {"samples": 2, "tasks": [{"task": "tasks/level1/5_X.py", "rounds": [["a.py", "@no_code"], ...]}]}
"""
import argparse
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def read(path):
    with open(path) as f:
        return f.read()


def as_model_new(reference):
    return re.sub(r"\bclass Model\(", "class ModelNew(", reference).replace("super(Model, self)", "super(ModelNew, self)")


def reply_text(spec, reference):
    if spec == "@no_code":
        return "I would profile it first; no code this time."
    code = as_model_new(reference) if spec == "@reference" else read(spec)
    return f"Plan: {spec}.\n\n```python\n{code.rstrip()}\n```\n"


class Script:
    def __init__(self, path):
        spec = json.loads(read(path))
        self.samples = spec["samples"]
        self.tasks = []
        for t in spec["tasks"]:
            source = read(t["task"])
            lines = {l.strip() for l in source.splitlines() if len(l.strip()) > 8}
            self.tasks.append({"task": t["task"], "source": source, "lines": lines, "rounds": t["rounds"], "turns": t.get("turns", {}), "served": 0})
        self.lock = threading.Lock()

    def answer(self, prompt):
        """(task, round, index, reply label, reply text) for one prompt; a refinement prompt's
        round and index are None."""
        later = re.search(r"## Your previous attempt \(turn (\d+)\)", prompt)
        with self.lock:
            task = max(self.tasks, key=lambda t: sum(l in prompt for l in t["lines"]))
            if later:
                turn = str(int(later.group(1)) + 1)
                label = task["turns"].get(turn)
                if label is None:
                    return task["task"], None, None, "@exhausted", "The script has no reply for this turn."
                return task["task"], None, None, label, reply_text(label, task["source"])
            n = task["served"]
            task["served"] += 1
        rnd, index = n // self.samples, n % self.samples
        if rnd >= len(task["rounds"]) or index >= len(task["rounds"][rnd]):
            return task["task"], rnd + 1, index, "@exhausted", "The script has no more replies."
        label = task["rounds"][rnd][index]
        return task["task"], rnd + 1, index, label, reply_text(label, task["source"])


def serve(script, port, log):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            prompt = "\n".join(m.get("content", "") for m in body.get("messages", []))
            task, rnd, index, label, text = script.answer(prompt)
            contrastive = "Earlier attempts" in prompt
            later = re.search(r"## Your previous attempt \(turn (\d+)\)", prompt)
            verdict = re.search(r"verdict on your previous attempt: ([a-z_ ]+)\.", prompt)
            with script.lock:
                log.write(json.dumps({"task": task, "round": rnd, "index": index, "reply": label, "contrastive_prompt": contrastive,
                                      "turn": int(later.group(1)) + 1 if later else 1,
                                      "previous_verdict": verdict.group(1) if verdict else None,
                                      "speedups_shown": re.findall(r"speedup ([0-9.]+x)", prompt)}) + "\n")
                log.flush()
            out = json.dumps({"model": "scripted", "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                              "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(text) // 4}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("script")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", default="-")
    a = p.parse_args()
    log = sys.stdout if a.log == "-" else open(a.log, "a")
    serve(Script(a.script), a.port, log)


if __name__ == "__main__":
    main()
