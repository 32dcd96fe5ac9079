"""The envelope: hello, malformed requests, roles, stream guards, exit status."""

import json
import platform

import torch

from conftest import SAME_CANDIDATE, load


def test_hello_reports_this_interpreter_and_no_gpu(start_runner):
    runner = start_runner("reference")
    reply = runner.ok("hello")
    assert reply["protocol"] == 1
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
    assert runner.ok("hello")["protocol"] == 1


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
    assert runner.ok("hello")["protocol"] == 1
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
