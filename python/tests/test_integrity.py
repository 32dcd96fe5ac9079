"""What code in the candidate's process can no longer do to the runner (issue 13), through real
runner processes: rewrite replies or read requests through the functions the protocol went
through, fill outputs in just in time, foresee another call's inputs, or see which calls will be
checked."""

import json

import pytest
import torch

from conftest import REFERENCE, SAME_CANDIDATE, load

from cudal1_runner.seeding import mix, seed_all

KEEP = 1 << 20


def _candidate(write, name, prelude="", body=None):
    source = SAME_CANDIDATE.replace("class ModelNew(", prelude + "\n    class ModelNew(")
    if body is not None:
        source = source.replace("return torch.relu(self.lin(x)) * self.scale", body)
    return write(name, source)


FORGER = """
    import json, os
    _write, _loads, _dumps = os.write, json.loads, json.dumps
    SEEN = []

    def _forging_write(fd, data):
        # Every reply it can get at: times divided by ten, findings emptied.
        try:
            reply = _loads(bytes(data).decode())
            for key in ("ms", "host_ms", "full_ms"):
                if key in reply:
                    reply[key] = [v / 10 for v in reply[key]]
            if "findings" in reply:
                reply["findings"] = []
            for r in reply.get("results", []):
                r["findings"] = []
            data = (_dumps(reply) + "\\n").encode()
        except Exception:
            pass
        return _write(fd, data)

    def _peeking_loads(text, *args, **kwargs):
        SEEN.append(text)
        with open(os.path.join(os.getcwd(), "requests-seen.txt"), "a") as f:
            f.write(str(text) + "\\n")
        return _loads(text, *args, **kwargs)

    os.write = _forging_write
    json.loads = _peeking_loads
"""


def test_replies_and_requests_do_not_go_through_functions_the_candidate_replaced(start_runner, write, reference, tmp_path):
    cand = start_runner("candidate")
    load(cand, reference, _candidate(write, "forger.py", FORGER))
    (result,) = cand.ok("outputs", seeds=[1], dir=str(tmp_path / "o"))["results"]
    # The reply reached us unaltered: the finding that names the replacement is in it.
    assert [f["kind"] for f in result["findings"]] == ["tampered_protocol"]
    assert "os.write" in result["findings"][0]["detail"] and "json.loads" in result["findings"][0]["detail"]
    # The times are the runner's: a timed block's reply equals what its own clock measured,
    # which the candidate's writer would have divided by ten on the way out.
    reply = cand.ok("time", seeds=[3, 4, 5], keep_bytes=KEEP)
    assert reply["host_ms"] == reply["ms"] and all(m > 0 for m in reply["ms"])
    assert reply["wall_ms"] >= sum(reply["ms"])
    # The candidate's json.loads never saw a request.
    assert not (tmp_path / "requests-seen.txt").exists()


def test_requests_name_no_checked_calls_and_a_block_writes_no_files(start_runner, write, reference, tmp_path):
    cand = start_runner("candidate")
    load(cand, reference, write("same.py", SAME_CANDIDATE))
    cand.ok("time", seeds=[7, 8, 9], keep_bytes=KEEP)
    # Nothing in the candidate's directory tells it which call will be checked: files appear
    # only when the Rust side, after the block, asks for one.
    assert not list(tmp_path.rglob("time-*.pt"))
    (check,) = cand.ok("reveal", calls=[1], dir=str(tmp_path / "t"))["checked"]
    assert check["seed"] == 8 and [p.name for p in tmp_path.rglob("time-*.pt")] == ["time-8.pt"]


def test_each_call_uses_the_seed_given_and_its_generators_reveal_only_that_seed(start_runner, write, reference, tmp_path):
    log = tmp_path / "calls.txt"
    body = f"open({str(log)!r}, 'a').write(f'{{torch.initial_seed()}} {{float(x.sum())!r}}\\n')\n            return torch.relu(self.lin(x)) * self.scale"
    cand = start_runner("candidate")
    load(cand, reference, _candidate(write, "logger.py", body=body))
    seeds = [123456789012, 5, 987654321]
    cand.ok("time", seeds=seeds, keep_bytes=0)
    rows = [line.split() for line in log.read_text().splitlines()]
    assert len(rows) == 3
    for seed, (initial, total) in zip(seeds, rows):
        # Inside the call the generators were seeded from the call's own seed (so a model that
        # draws random numbers draws the same in both roles), which says nothing of another call's.
        assert int(initial) == mix(seed, 0x5EED)
        seed_all(seed)
        assert float(total) == float(torch.randn(4, 8).sum())


def test_an_output_filled_when_the_runner_looks_at_the_model_is_captured_unfilled(start_runner, write, reference, tmp_path):
    # forward returns NaNs and fills them in from __getattribute__ when `__dict__` is read (which
    # the runner used to do between the call and the output's copy), or from a metaclass.
    instance = SAME_CANDIDATE.replace(
        "return torch.relu(self.lin(x)) * self.scale",
        "out = torch.full((x.shape[0], 8), float('nan'))\n"
        "            self.pending.append((x, out))\n"
        "            return out\n\n"
        "        def __getattribute__(self, name):\n"
        "            if name == '__dict__':\n"
        "                own = object.__getattribute__(self, '__dict__')\n"
        "                for x, out in own.get('pending', []):\n"
        "                    out.copy_(torch.relu(own['_modules']['lin'](x)) * own['scale'])\n"
        "                own.get('pending', []).clear()\n"
        "                return own\n"
        "            return super().__getattribute__(name)",
    ).replace("self.lin = nn.Linear(N, N)", "self.lin = nn.Linear(N, N)\n            self.pending = []")
    meta = SAME_CANDIDATE.replace(
        "class ModelNew(nn.Module):",
        "PENDING = []\n\n"
        "    class _Meta(type):\n"
        "        def __getattribute__(cls, name):\n"
        "            if name in ('__dict__', '__mro__', '__qualname__', '__name__'):\n"
        "                while PENDING:\n"
        "                    model, x, out = PENDING.pop()\n"
        "                    out.copy_(torch.relu(model.lin(x)) * model.scale)\n"
        "            return super().__getattribute__(name)\n\n"
        "    class ModelNew(nn.Module, metaclass=_Meta):",
    ).replace(
        "return torch.relu(self.lin(x)) * self.scale",
        "out = torch.full((x.shape[0], 8), float('nan'))\n            PENDING.append((self, x, out))\n            return out",
    )
    for name, source in (("instance", instance), ("metaclass", meta)):
        cand = start_runner("candidate")
        load(cand, reference, write(f"{name}.py", source))
        (result,) = cand.ok("outputs", seeds=[1], dir=str(tmp_path / name))["results"]
        (saved,) = torch.load(result["path"], weights_only=True)["outputs"]
        assert torch.isnan(saved).all(), name
        cand.ok("time", seeds=[2, 3], keep_bytes=KEEP)
        (check,) = cand.ok("reveal", calls=[1], dir=str(tmp_path / name))["checked"]
        (timed,) = torch.load(check["path"], weights_only=True)["outputs"]
        assert torch.isnan(timed).all(), name


def test_a_mode_that_fills_outputs_when_touched_sees_none_of_the_runners_copies(start_runner, write, reference, tmp_path):
    prelude = (
        "from torch.overrides import TorchFunctionMode\n"
        "    PENDING = []\n\n"
        "    class _Fill(TorchFunctionMode):\n"
        "        def __torch_function__(self, func, types, args=(), kwargs=None):\n"
        "            with torch._C.DisableTorchFunction():\n"
        "                for a in list(args) + list((kwargs or {}).values()):\n"
        "                    if isinstance(a, torch.Tensor) and not a.requires_grad and a.dim() == 2 and a.shape[1] == 8:\n"
        "                        a.fill_(7.0)\n"
        "            return func(*args, **(kwargs or {}))\n\n"
        "    _Fill().__enter__()\n"
    )
    body = "with torch._C.DisableTorchFunction():\n                return torch.zeros(x.shape[0], 8)"
    cand = start_runner("candidate")
    load(cand, reference, _candidate(write, "mode.py", prelude, body))
    (result,) = cand.ok("outputs", seeds=[1], dir=str(tmp_path / "o"))["results"]
    assert "tampered_torch_mode" in [f["kind"] for f in result["findings"]]
    (saved,) = torch.load(result["path"], weights_only=True)["outputs"]
    assert torch.equal(saved, torch.zeros(4, 8))


def test_a_changed_output_differs_from_its_capture():
    from cudal1_runner.capture import capture, fingerprint
    from cudal1_runner.outputs import changed_findings

    out = (torch.zeros(3, 2), 4)
    captured = capture(out)
    assert changed_findings(captured, list(out)) == []
    out[0][1, 1] = 1.0
    (found,) = changed_findings(captured, list(out))
    assert found["kind"] == "output_not_ready"
    assert fingerprint(captured.copies, True) != fingerprint([out[0], torch.tensor(4)], True)
    assert fingerprint(captured.copies, False) != fingerprint([out[0], torch.tensor(4)], False)


def test_a_reply_line_is_compact_json_with_nan_as_null():
    from cudal1_runner.wire import decode, encode

    text = encode({"a": [1, 2.5, float("nan")], "b": "é\n"})
    assert "\n" not in text and json.loads(text) == {"a": [1, 2.5, None], "b": "é\n"}
    assert decode(b'{"id": 1, "op": "hello"}\n') == {"id": 1, "op": "hello"}
    for bad in (b"{", b"{} {}", b""):
        try:
            decode(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_gpu_fingerprints_finished_together_equal_those_made_one_by_one():
    # The GPU path leaves each call's sums on the device and finishes a block's at once; the
    # reference recomputes them one file at a time. Run here on CPU tensors (same integers).
    from cudal1_runner.capture import capture, fingerprint, resolve

    outputs = [(torch.randn(5, 3), 2), torch.zeros(0), (torch.arange(7, dtype=torch.uint8), True)]
    captured = [capture(o) for o in outputs]
    assert resolve([c.fingerprint_later() for c in captured]) == [fingerprint(c.copies, False) for c in captured]
    assert resolve([]) == []


def test_an_output_without_room_for_its_copy_is_out_of_memory_not_an_empty_output(monkeypatch):
    # Beside other jobs a GPU can be full when an output is copied: that is said as
    # out-of-memory (the engine then judges the job again holding the device alone), for the
    # candidate as for the reference, never compared as an empty stand-in.
    from cudal1_runner import capture as capture_mod
    from cudal1_runner.errors import OOM, RunnerError

    def full(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB")

    monkeypatch.setattr(capture_mod, "_clone", full)
    for strict in (False, True):
        with pytest.raises(RunnerError) as caught:
            capture_mod.capture(torch.ones(3), strict=strict)
        assert caught.value.kind == OOM
        assert "4.00 GiB" in caught.value.message

    # Other failures to copy stay what they were: an empty stand-in for a candidate's odd leaf.
    def odd(*args, **kwargs):
        raise ValueError("not a tensor one can copy")

    monkeypatch.setattr(capture_mod, "_clone", odd)
    assert capture_mod.capture(torch.ones(3)).copies[0].numel() == 0
