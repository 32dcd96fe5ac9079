"""A real `cudal1 serve` (the release binary) on the CPU over the bundled suite (tasks/), with a
worker inside it, for the adapters' tests. Completions are the bundled solutions (solutions/)."""

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PYTHON_DIR = os.path.join(REPO, "python")
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

# Tasks small enough on the CPU at this scale (their leading dimension is multiplied by it).
SCALE = "0.002"
TASKS = ["level1/11_Softmax_Explicit", "level1/12_LayerNorm_Explicit"]


def binary():
    path = os.environ.get("CUDAL1_BIN") or os.path.join(REPO, "target", "release", "cudal1")
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing: build it with `cargo build --release --bin cudal1` (or set CUDAL1_BIN)")
    return path


def solution(task, variant):
    with open(os.path.join(REPO, "solutions", *task.split("/"), variant + ".py")) as f:
        return f.read()


def answer(task, variant, extra=""):
    """A model's reply: prose, then the program."""
    return f"Here is a faster version.\n\n```python\n{extra}{solution(task, variant)}\n```\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Serve:
    def __init__(self, tmp, extra=()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = os.path.join(tmp, "serve.db")
        os.makedirs(tmp, exist_ok=True)
        self.log = open(os.path.join(tmp, "serve.log"), "wb")
        python = os.environ.get("CUDAL1_PYTHON") or os.path.join(REPO, ".venv", "bin", "python")
        cmd = [binary(), "serve", "--suite", os.path.join(REPO, "tasks"), "--listen", f"127.0.0.1:{self.port}",
               "--device", "cpu", "--mode", "correctness", "--scale", SCALE, "--db", self.db,
               "--python", python, "--cache-dir", os.path.join(tmp, "cache"), "--lanes", "2",
               "--compile-workers", "1", "--openrlhf-wait", "60", *extra]
        env = dict(os.environ, CUDAL1_SERVE_TOKEN="test-token")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2).read()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("cudal1 serve did not start:\n" + self.output())
                time.sleep(0.2)

    def output(self):
        with open(self.log.name, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(2)  # Ctrl-C: waiting requests answer, the worker gives jobs back
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def serve():
    tmp = tempfile.mkdtemp(prefix="cudal1-rl-")
    s = Serve(tmp)
    os.environ["CUDAL1_URL"] = s.url
    os.environ["CUDAL1_SERVE_TOKEN"] = "test-token"
    yield s
    s.stop()
