import json
import os
import subprocess
import sys

import pytest

# The directory that holds the cudal1_model package, as PYTHONPATH is for the Rust side.
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny random model with a chat template (cudal1_model.tiny), made once per run."""
    from cudal1_model import tiny

    return tiny.make(str(tmp_path_factory.mktemp("tiny") / "model"))


def start(*args):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    return subprocess.Popen([sys.executable, "-m", "cudal1_model", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def talk(proc, *requests, timeout=600):
    data = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in requests).encode()
    out, err = proc.communicate(data, timeout=timeout)
    return [json.loads(line) for line in out.decode().splitlines()], err.decode(), proc.returncode
