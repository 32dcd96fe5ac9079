"""The envelope: hello, malformed requests, roles, stream guards, exit status."""

import json
import platform

import pytest
import torch

from cudal1_runner import PROTOCOL_VERSION
from conftest import SAME_CANDIDATE, load


def test_hello_reports_this_interpreter_and_no_gpu(start_runner):
    runner = start_runner("reference")
    reply = runner.ok("hello")
    assert reply["protocol"] == PROTOCOL_VERSION
    assert reply["python"] == platform.python_version()
    assert reply["torch"] == torch.__version__
    if not torch.cuda.is_available():
        assert reply["cuda"] is None
        assert reply["devices"] == []
    assert reply["driver"] is None or isinstance(reply["driver"], str)


def test_malformed_lines_get_bad_request_and_the_runner_keeps_serving(start_runner):
    runner = start_runner("candidate")
    runner.send_raw(b"this is not json\n")
    reply = runner.read_reply()
    assert reply["id"] is None and reply["ok"] is False
    assert reply["error"]["kind"] == "bad_request"
    runner.send_raw(b"[1, 2]\n")
    assert runner.read_reply()["error"]["kind"] == "bad_request"
    runner.send_raw(b'{"id": 9}\n')
    reply = runner.read_reply()
    assert reply["id"] == 9 and reply["error"]["kind"] == "bad_request"
    assert runner.error("no_such_op")["kind"] == "bad_request"
    assert runner.ok("hello")["protocol"] == PROTOCOL_VERSION


def test_ops_are_limited_to_their_role(start_runner, tmp_path):
    candidate = start_runner("candidate")
    err = candidate.error("compare", expected=str(tmp_path / "a.pt"), actual=str(tmp_path / "b.pt"), atol=0, rtol=0)
    assert err["kind"] == "bad_request"
    assert candidate.error("compile", candidate=str(tmp_path / "c.py"))["kind"] == "bad_request"
    reference = start_runner("reference")
    assert reference.error("compile", candidate=str(tmp_path / "c.py"))["kind"] == "bad_request"
    compiler = start_runner("compile")
    assert compiler.error("outputs", seeds=[1], dir=str(tmp_path))["kind"] == "bad_request"


def test_ops_before_load_and_bad_fields_are_bad_requests(start_runner, reference, tmp_path):
    runner = start_runner("reference")
    assert runner.error("outputs", seeds=[1], dir=str(tmp_path))["kind"] == "bad_request"
    assert runner.error("load", reference="relative.py", device="cpu", init_seed=1)["kind"] == "bad_request"
    assert runner.error("load", reference=reference, device="tpu", init_seed=1)["kind"] == "bad_request"
    assert runner.error("load", reference=reference, device="cpu", init_seed="x")["kind"] == "bad_request"
    assert runner.error("load", reference=reference, device="cpu", init_seed=1, precision=[])["kind"] == "bad_request"
    runner.ok("load", reference=reference, device="cpu", init_seed=1, precision=None)
    runner.ok("load", reference=reference, device="cpu", init_seed=1, precision={"allow_tf32": False})
    load(runner, reference)
    assert runner.error("outputs", seeds=[-1], dir=str(tmp_path))["kind"] == "bad_request"
    assert runner.error("outputs", seeds=[1], dir="rel/dir")["kind"] == "bad_request"
    assert runner.error("time", seeds=[1, -2])["kind"] == "bad_request"
    assert runner.error("time", seeds=[1], keep_bytes=-1)["kind"] == "bad_request"
    assert runner.error("reveal", calls=[0], dir=str(tmp_path))["kind"] == "bad_request"  # not served
    if not torch.cuda.is_available():
        assert runner.error("load", reference=reference, device="cuda:0", init_seed=1)["kind"] == "bad_request"


def test_shutdown_replies_and_exits_zero(start_runner):
    runner = start_runner("reference")
    assert runner.ok("shutdown") == {"id": 1, "ok": True}
    assert runner.proc.wait(timeout=60) == 0


def test_end_of_input_exits_zero(start_runner):
    runner = start_runner("candidate")
    runner.proc.stdin.close()
    assert runner.proc.wait(timeout=60) == 0


NOISY = SAME_CANDIDATE.replace(
    "class ModelNew(",
    """
    import os, sys
    print("noise at import")
    os.write(1, b"raw noise on fd 1\\n")
    STOLEN = sys.stdin.read()

    class ModelNew(""",
).replace(
    "return torch.relu(self.lin(x)) * self.scale",
    """print("noise in forward", {"id": 1, "ok": True})
            sys.stdout.write("more noise\\n")
            os.write(1, b"{\\"id\\": 999}\\n")
            return torch.relu(self.lin(x)) * self.scale""",
)


def test_prints_and_stdin_reads_in_candidate_code_do_not_touch_the_protocol(start_runner, write, reference, tmp_path):
    candidate = write("noisy.py", NOISY)
    runner = start_runner("candidate")
    load(runner, reference, candidate)
    reply = runner.ok("outputs", seeds=[1], dir=str(tmp_path / "out"))
    assert reply["results"][0]["seed"] == 1
    runner.ok("time", seeds=[5, 6])
    # The request after the candidate tried to read stdin still arrives intact.
    assert runner.ok("hello")["protocol"] == PROTOCOL_VERSION
    log = runner.stderr()
    for text in ("noise at import", "raw noise on fd 1", "noise in forward", "more noise", '{"id": 999}'):
        assert text in log


def test_nan_in_a_reply_becomes_null_json(start_runner, write):
    reference = write(
        "nanref.py",
        """
        import torch
        class Model(torch.nn.Module):
            def forward(self, x, alpha):
                return x * alpha
        def get_inputs():
            return [torch.ones(2), float("nan")]
        def get_init_inputs():
            return []
        """,
    )
    runner = start_runner("reference")
    runner.send_raw((json.dumps({"id": 1, "op": "load", "reference": reference, "device": "cpu", "init_seed": 0}) + "\n").encode())
    line = runner.proc.stdout.readline()
    assert b"NaN" not in line
    reply = json.loads(line)
    assert reply["inputs"][1] == {"kind": "float", "value": None}


def test_outputs_off_a_gpu_are_always_saved_and_device_places_are_refused(start_runner, reference, tmp_path):
    """``share_bytes`` keeps outputs on a CUDA device only; on the CPU every output is a file, and
    a ``compare`` naming kept or exported outputs that are not there is a bad request."""
    runner = start_runner("reference")
    load(runner, reference)
    (r,) = runner.ok("expected", seeds=[1], dir=str(tmp_path), share_bytes=1 << 30)["results"]
    assert r["path"].endswith(".pt") and "kept" not in r and r["nbytes"] > 0
    assert runner.ok("release")["released_bytes"] == 0
    assert runner.error("expected", seeds=[1], dir=str(tmp_path), share_bytes=-1)["kind"] == "bad_request"
    compare = lambda expected, actual: runner.error("compare", expected=expected, actual=actual, atol=0, rtol=0)
    assert "no expected output of seed 1" in compare({"kept": 1}, r["path"])["message"]
    assert "CUDA" in compare(r["path"], {"shared": []})["message"]
    assert compare({"file": "relative.pt"}, r["path"])["kind"] == "bad_request"
    assert compare({"file": r["path"], "kept": 1}, r["path"])["kind"] == "bad_request"
    assert compare({"elsewhere": 1}, r["path"])["kind"] == "bad_request"
    same = runner.ok("compare", expected={"file": r["path"]}, actual=r["path"], atol=0, rtol=0)
    assert same["outputs"][0]["mismatches"] == 0


def test_exported_output_claims_are_checked_before_the_driver_is_asked():
    from cudal1_runner import sharing

    good = {"handle": "ab" * 64, "offset": 0, "dtype": "float32", "shape": [2, 3]}
    dtype, shape, raw, offset, nbytes = sharing._entry(good)
    assert (dtype, shape, len(raw), offset, nbytes) == (torch.float32, [2, 3], 64, 0, 24)
    assert sharing._entry({**good, "shape": [0, 3], "handle": None})[4] == 0
    bad = [
        {**good, "dtype": "object"},
        {**good, "shape": [-1]},
        {**good, "shape": "2x3"},
        {**good, "shape": [True]},
        {**good, "offset": -8},
        {**good, "offset": 1.5},
        {**good, "handle": "ab" * 63},
        {**good, "handle": "zz" * 64},
        {**good, "handle": None},
        ["not", "an", "object"],
    ]
    for entry in bad:
        with pytest.raises(sharing.SharingError):
            sharing._entry(entry)
    with pytest.raises(sharing.SharingError):
        sharing.open_copy("not a list", torch.device("cpu"))


def test_compare_opens_exactly_the_exported_outputs_it_names(monkeypatch):
    """The wiring of ``compare`` for outputs on the device, in-process: kept expected outputs
    by seed, and the candidate's entries handed to ``sharing.open_copy`` as sent (the device
    itself is only touched through the replaced functions)."""
    from cudal1_runner import session as session_mod, sharing

    s = session_mod.Session("reference")
    s.device = torch.device("cuda", 0)
    kept = [torch.arange(6.0)]
    s.held.expected[9] = kept
    opened = []
    monkeypatch.setattr(sharing, "open_copy", lambda entries, device: opened.append((entries, device)) or ["copy"])
    monkeypatch.setattr(session_mod, "compare", lambda expected, actual, atol, rtol, device: (expected, actual["open"]()))
    expected, actual = s._op_compare({"expected": {"kept": 9}, "actual": {"shared": ["entry"]}, "atol": 0, "rtol": 0})
    assert expected == {"tensors": kept} and actual == ["copy"]
    assert opened == [(["entry"], torch.device("cuda", 0))]
