"""The `time` and `reveal` ops on the CPU: samples, captured outputs, their comparison."""

import os

import pytest
import torch

from conftest import SAME_CANDIDATE, load

KEEP = 1 << 20


def _revealed(runner, calls, out_dir):
    return runner.ok("reveal", calls=calls, dir=str(out_dir))["checked"]


def test_time_returns_samples_and_revealed_outputs_that_compare_equal(start_runner, write, reference, tmp_path):
    candidate = write("same.py", SAME_CANDIDATE)
    cand = start_runner("candidate")
    load(cand, reference, candidate)
    seeds = [100000 + 7 * i for i in range(6)]
    reply = cand.ok("time", seeds=seeds, flush_l2=True, warmup=False, keep_bytes=KEEP)
    assert len(reply["ms"]) == 6 and all(x > 0 for x in reply["ms"])
    assert reply["host_ms"] == reply["ms"] == reply["full_ms"]  # the CPU has one clock
    assert len(reply["issue_ms"]) == 6 and all(0 < i <= h for i, h in zip(reply["issue_ms"], reply["host_ms"]))
    assert reply["wall_ms"] >= sum(reply["ms"])
    # Every call's output was captured and fingerprinted; all of them are kept.
    assert reply["kept"] == 6 and len(reply["fingerprints"]) == 6 and len(set(reply["fingerprints"])) == 6
    assert reply["findings"] == []
    # Which calls are checked is chosen after the block: call i used seeds[i].
    checked = _revealed(cand, [1, 4], tmp_path / "cand")
    assert [c["seed"] for c in checked] == [seeds[1], seeds[4]]
    ref = start_runner("reference")
    load(ref, reference)
    expected = ref.ok("expected", seeds=[seeds[1], seeds[4]], dir=str(tmp_path / "ref"))["results"]
    for i, check, exp in zip([1, 4], checked, expected):
        assert check["path"].endswith(f"time-{check['seed']}.pt")
        assert check["findings"] == []
        cmp = ref.ok("compare", expected=exp["path"], actual=check["path"], atol=1e-5, rtol=1e-5)
        assert cmp["load_error"] is None
        (out,) = cmp["outputs"]
        assert out["numel"] == 32 and out["mismatches"] == 0 and out["max_abs"] == 0.0
        # The trusted side recomputes the fingerprint the runner committed to after the call.
        assert cmp["fingerprint"] == reply["fingerprints"][i]
    # Different calls saw different inputs.
    a = torch.load(checked[0]["path"], weights_only=True)["outputs"][0]
    b = torch.load(checked[1]["path"], weights_only=True)["outputs"][0]
    assert not torch.equal(a, b)


def test_the_timed_calls_use_the_seeds_given_and_the_outputs_file_fingerprints_match(start_runner, write, reference, tmp_path):
    cand = start_runner("candidate")
    load(cand, reference, write("same.py", SAME_CANDIDATE))
    timed = cand.ok("time", seeds=[11, 12], keep_bytes=KEEP)
    # `outputs` for the same seeds gives the same outputs, so the same fingerprints.
    results = cand.ok("outputs", seeds=[11, 12], dir=str(tmp_path / "o"))["results"]
    assert [r["fingerprint"] for r in results] == timed["fingerprints"]


def test_only_what_fits_in_keep_bytes_is_kept_and_only_kept_calls_can_be_revealed(start_runner, write, reference, tmp_path):
    cand = start_runner("candidate")
    load(cand, reference, write("same.py", SAME_CANDIDATE))
    # One output is 4 x 8 float32 = 128 bytes.
    reply = cand.ok("time", seeds=[1, 2, 3], keep_bytes=256)
    assert reply["kept"] == 2 and len(reply["fingerprints"]) == 3
    assert cand.error("reveal", calls=[2], dir=str(tmp_path))["kind"] == "bad_request"
    assert cand.error("reveal", calls=[-1], dir=str(tmp_path))["kind"] == "bad_request"
    _revealed(cand, [0, 1], tmp_path)
    # A later request drops the kept outputs.
    cand.ok("outputs", seeds=[1], dir=str(tmp_path / "o"))
    assert cand.error("reveal", calls=[0], dir=str(tmp_path))["kind"] == "bad_request"
    assert cand.ok("time", seeds=[1], keep_bytes=0)["kept"] == 0


def test_warmup_reports_only_issue_times_and_keeps_nothing(start_runner, write, reference, tmp_path):
    cand = start_runner("candidate")
    load(cand, reference, write("same.py", SAME_CANDIDATE))
    reply = cand.ok("time", seeds=[7, 8, 9], warmup=True, keep_bytes=KEEP)
    assert reply["ms"] == [] and reply["host_ms"] == [] and reply["kept"] == 0
    assert len(reply["issue_ms"]) == 3  # they size the GPU spin
    assert cand.error("reveal", calls=[0], dir=str(tmp_path))["kind"] == "bad_request"


def test_a_spin_is_ignored_on_the_cpu_and_a_bad_one_is_a_bad_request(start_runner, reference, tmp_path):
    ref = start_runner("reference")
    load(ref, reference)
    reply = ref.ok("time", seeds=[5, 6], spin_us=50.0)
    assert len(reply["ms"]) == 2 and reply["ms"] == reply["full_ms"]
    for bad in (-1, 1e9, "50", True):
        err = ref.error("time", seeds=[5], spin_us=bad)
        assert err["kind"] == "bad_request" and "`spin_us`" in err["message"], (bad, err)


def test_a_model_that_caches_on_the_input_pointer_is_caught_by_checks(start_runner, write, reference, tmp_path):
    # Fresh inputs each call: a result cached from the first call is wrong for the next one.
    candidate = write(
        "cache.py",
        SAME_CANDIDATE.replace(
            "return torch.relu(self.lin(x)) * self.scale",
            "if not hasattr(self, 'memo'):\n"
            "                self.memo = torch.relu(self.lin(x)) * self.scale\n"
            "            return self.memo.clone()",
        ),
    )
    cand = start_runner("candidate")
    load(cand, reference, candidate)
    cand.ok("time", seeds=[40, 41, 42], keep_bytes=KEEP)
    checked = _revealed(cand, [2], tmp_path / "c")
    ref = start_runner("reference")
    load(ref, reference)
    (exp,) = ref.ok("expected", seeds=[42], dir=str(tmp_path / "r"))["results"]
    cmp = ref.ok("compare", expected=exp["path"], actual=checked[0]["path"], atol=1e-5, rtol=1e-5)
    assert cmp["outputs"][0]["mismatches"] > 0


def test_every_timed_call_reports_output_findings(start_runner, write, reference, tmp_path):
    # Only the third call returns its input: no call of a block goes uninspected.
    candidate = write(
        "alias.py",
        SAME_CANDIDATE.replace(
            "return torch.relu(self.lin(x)) * self.scale",
            "self.n = getattr(self, 'n', 0) + 1\n            return x if self.n == 3 else torch.relu(self.lin(x)) * self.scale",
        ),
    )
    cand = start_runner("candidate")
    load(cand, reference, candidate)
    reply = cand.ok("time", seeds=[1, 2, 3, 4], keep_bytes=KEEP)
    assert [f["kind"] for f in reply["findings"]] == ["output_aliases_input"]


GC_PROBE = """
    import gc
    import torch
    import torch.nn as nn

    class ModelNew(nn.Module):
        def __init__(self, scale):
            super().__init__()

        def forward(self, x):
            # 1.0 where the cyclic garbage collector is on during the call, else 0.0.
            return torch.full((x.shape[0], 8), float(gc.isenabled()))

    def get_inputs():
        return [torch.randn(4, 8)]

    def get_init_inputs():
        return [2.0]
"""


def test_the_collector_is_off_inside_timed_blocks_and_back_on_after(start_runner, write, reference, tmp_path):
    cand = start_runner("candidate")
    load(cand, reference, write("gc_probe.py", GC_PROBE))
    cand.ok("time", seeds=[5, 6, 7], warmup=False, keep_bytes=KEEP)
    (check,) = _revealed(cand, [2], tmp_path / "t")
    (timed,) = torch.load(check["path"], weights_only=True)["outputs"]
    assert torch.all(timed == 0.0)
    (later,) = cand.ok("outputs", seeds=[1], dir=str(tmp_path / "o"))["results"]
    (untimed,) = torch.load(later["path"], weights_only=True)["outputs"]
    assert torch.all(untimed == 1.0)


CORE_PROBE = """
    import os
    import torch
    import torch.nn as nn

    class ModelNew(nn.Module):
        def __init__(self, scale):
            super().__init__()

        def forward(self, x):
            # The core the calling thread is pinned to, or -1 where it may run on several.
            cores = os.sched_getaffinity(0)
            return torch.full((x.shape[0], 8), float(min(cores)) if len(cores) == 1 else -1.0)

    def get_inputs():
        return [torch.randn(4, 8)]

    def get_init_inputs():
        return [2.0]
"""


def test_a_block_with_a_core_runs_every_call_on_it_and_gives_the_cores_back(start_runner, write, reference, tmp_path):
    allowed = os.sched_getaffinity(0)
    core = max(allowed)
    cand = start_runner("candidate")
    load(cand, reference, write("core_probe.py", CORE_PROBE))
    reply = cand.ok("time", seeds=[5, 6, 7], cpu=core, keep_bytes=KEEP)
    for check in _revealed(cand, [0, 2], tmp_path / "t"):
        (timed,) = torch.load(check["path"], weights_only=True)["outputs"]
        assert torch.all(timed == float(core))
    assert reply["findings"] == []
    if len(allowed) > 1:
        (later,) = cand.ok("outputs", seeds=[1], dir=str(tmp_path / "o"))["results"]
        (untimed,) = torch.load(later["path"], weights_only=True)["outputs"]
        assert torch.all(untimed == -1.0)


def test_a_candidate_that_moves_the_timed_thread_is_reported_and_put_back(start_runner, write, reference, tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two cores")
    core, other = allowed[-1], allowed[0]
    mover = CORE_PROBE.replace(
        "cores = os.sched_getaffinity(0)",
        f"cores = os.sched_getaffinity(0)\n            os.sched_setaffinity(0, {{{other}}})",
    )
    cand = start_runner("candidate")
    load(cand, reference, write("mover.py", mover))
    reply = cand.ok("time", seeds=[5, 6, 7], cpu=core, keep_bytes=KEEP)
    assert [f["kind"] for f in reply["findings"]] == ["affinity_changed"]
    assert f"core {core}" in reply["findings"][0]["detail"]
    # Each call starts back on the core although the one before moved the thread away.
    for check in _revealed(cand, [1, 2], tmp_path / "t"):
        (timed,) = torch.load(check["path"], weights_only=True)["outputs"]
        assert torch.all(timed == float(core))


def test_a_core_that_is_not_a_number_is_a_bad_request(start_runner, reference, tmp_path):
    ref = start_runner("reference")
    load(ref, reference)
    err = ref.error("time", seeds=[5], cpu="3")
    assert err["kind"] == "bad_request" and "`cpu`" in err["message"]
