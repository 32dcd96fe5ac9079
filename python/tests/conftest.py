"""Drive real runner processes over their real stdin/stdout."""

import json
import os
import selectors
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parent.parent
# Pure helpers of the runner (seed mixing, frame origins) are also tested in-process.
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))
REPLY_TIMEOUT_S = 300


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: builds a C++ extension (about a minute)")


class Runner:
    """One ``python -m cudal1_runner`` process; stderr goes to a file for inspection."""

    def __init__(self, role, workdir, env=None):
        self.stderr_path = Path(workdir) / f"stderr-{role}-{id(self)}.log"
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = str(PYTHON_DIR)
        full_env.update(env or {})
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cudal1_runner", "--role", role],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=str(workdir),
            env=full_env,
            # Unbuffered: a select() on the pipe must not miss bytes already read into a buffer.
            bufsize=0,
        )
        self._next_id = 0

    def send_raw(self, line: bytes):
        self.proc.stdin.write(line)
        self.proc.stdin.flush()

    def read_reply(self):
        line = self._read_line()
        assert line.endswith(b"\n"), f"reply line not terminated: {line!r}"
        return json.loads(line)

    def _read_line(self):
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout=REPLY_TIMEOUT_S)
        sel.close()
        assert ready, f"no reply within {REPLY_TIMEOUT_S}s; stderr:\n{self.stderr()}"
        return self.proc.stdout.readline()

    def request(self, op, **fields):
        self._next_id += 1
        rid = self._next_id
        self.send_raw((json.dumps({"id": rid, "op": op, **fields}) + "\n").encode())
        reply = self.read_reply()
        assert reply["id"] == rid, reply
        return reply

    def ok(self, op, **fields):
        reply = self.request(op, **fields)
        assert reply["ok"] is True, f"{op} failed: {reply}\nstderr:\n{self.stderr()}"
        return reply

    def error(self, op, **fields):
        reply = self.request(op, **fields)
        assert reply["ok"] is False, f"{op} unexpectedly succeeded: {reply}"
        assert set(reply["error"]) == {"kind", "message", "traceback"}
        return reply["error"]

    def stderr(self):
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self._stderr.close()


@pytest.fixture
def start_runner(tmp_path):
    started = []

    def start(role, env=None):
        runner = Runner(role, tmp_path, env)
        started.append(runner)
        return runner

    yield start
    for runner in started:
        runner.close()


@pytest.fixture
def write(tmp_path):
    """Write a dedented program into tmp_path; returns its absolute path as a string."""

    def write_file(name, source):
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return str(path)

    return write_file


# A small reference task in the KernelBench format.
REFERENCE = """
    import torch
    import torch.nn as nn

    N = 8
    BATCH = 4

    class Model(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale
            self.lin = nn.Linear(N, N)

        def forward(self, x):
            return torch.relu(self.lin(x)) * self.scale

    def get_inputs():
        return [torch.randn(BATCH, N)]

    def get_init_inputs():
        return [2.0]
"""

# The same program as a candidate.
SAME_CANDIDATE = REFERENCE.replace("class Model(", "class ModelNew(")


@pytest.fixture
def reference(write):
    return write("ref.py", REFERENCE)


def load(runner, reference, candidate=None, device="cpu", init_seed=42):
    return runner.ok("load", reference=reference, candidate=candidate, device=device, init_seed=init_seed)
