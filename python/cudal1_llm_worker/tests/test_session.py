"""The protocol logic, with a small in-process backend standing in for the model."""

import json

import pytest

from cudal1_llm_worker.session import BadRequest, Session, parse_generate


class Recorder:
    """Answers generate with a fixed reply and remembers the arguments it got."""

    def __init__(self, fail=None):
        self.calls = []
        self.fail = fail

    def describe(self):
        return {"model": "recorder.gguf", "device": "cpu"}

    def generate(self, **kwargs):
        self.calls.append(kwargs)
        if self.fail:
            raise self.fail
        return {"text": "hi", "prompt_tokens": 7, "completion_tokens": 1, "finish_reason": "stop", "model": "r"}


def serve(session, obj):
    line = obj if isinstance(obj, (str, bytes)) else json.dumps(obj)
    return session.serve(line)


def test_generate_passes_validated_arguments_and_echoes_the_id():
    backend = Recorder()
    reply, stop = serve(Session(backend), {
        "id": 5, "op": "generate", "messages": [{"role": "user", "content": "x", "extra": 1}],
        "max_tokens": 3, "temperature": 0, "top_p": 0.5, "seed": 2 ** 70})
    assert not stop
    assert reply == {"id": 5, "ok": True, "text": "hi", "prompt_tokens": 7, "completion_tokens": 1,
                     "finish_reason": "stop", "model": "r"}
    assert backend.calls == [{"messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
                              "temperature": 0.0, "top_p": 0.5, "seed": 2 ** 70 % 2 ** 63}]


@pytest.mark.parametrize("bad, needle", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "message 0"),
    ({"messages": [{"role": "user", "content": 3}]}, "message 0"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": True}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": -1}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "top_p": 0}, "top_p"),
    ({"messages": [{"role": "user", "content": "x"}], "seed": -4}, "seed"),
])
def test_bad_generate_requests_are_refused_with_the_field(bad, needle):
    with pytest.raises(BadRequest, match=needle):
        parse_generate(bad)
    backend = Recorder()
    reply, _ = serve(Session(backend), {"id": 1, "op": "generate", **bad})
    assert reply["ok"] is False and reply["error"]["kind"] == "bad_request"
    assert backend.calls == []


def test_envelope_errors():
    s = Session(Recorder())
    assert serve(s, "{nope")[0]["error"]["kind"] == "bad_request"
    assert serve(s, "[1, 2]")[0]["error"]["kind"] == "bad_request"
    reply, stop = serve(s, {"id": 2, "op": "fly"})
    assert (reply["id"], reply["error"]["kind"], stop) == (2, "bad_request", False)
    assert serve(s, {"id": 3, "op": "shutdown"}) == ({"id": 3, "ok": True}, True)


def test_hello_reports_protocol_and_model():
    reply, _ = serve(Session(Recorder()), {"id": 1, "op": "hello"})
    assert reply["ok"] and reply["protocol"] == 1 and reply["model"] == "recorder.gguf"


def test_a_failed_load_is_reported_to_every_request_but_shutdown():
    s = Session(None, "FileNotFoundError: GGUF file not found: /x.gguf")
    for op in ("hello", "generate"):
        reply, stop = serve(s, {"id": 9, "op": op, "messages": [{"role": "user", "content": "x"}]})
        assert reply["error"] == {"kind": "load_error", "message": "FileNotFoundError: GGUF file not found: /x.gguf"}
        assert not stop
    assert serve(s, {"id": 10, "op": "shutdown"})[1] is True


def test_backend_failures_are_classified():
    reply, _ = serve(Session(Recorder(fail=RuntimeError("CUDA out of memory. Tried to allocate"))),
                     {"id": 1, "op": "generate", "messages": [{"role": "user", "content": "x"}]})
    assert reply["error"]["kind"] == "oom"
    reply, _ = serve(Session(Recorder(fail=ValueError("shape mismatch"))),
                     {"id": 1, "op": "generate", "messages": [{"role": "user", "content": "x"}]})
    assert reply["error"]["kind"] == "runtime_error" and "shape mismatch" in reply["error"]["message"]
