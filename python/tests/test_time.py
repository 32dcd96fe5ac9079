"""The `time` op on the CPU: samples, checked outputs, and their comparison."""

import os

import pytest
import torch

from conftest import SAME_CANDIDATE, load

from cudal1_runner.seeding import mix


def test_time_returns_samples_and_checked_outputs_that_compare_equal(start_runner, write, reference, tmp_path):
    candidate = write("same.py", SAME_CANDIDATE)
    cand = start_runner("candidate")
    load(cand, reference, candidate)
    reply = cand.ok("time", calls=6, seed_base=100000, flush_l2=True, check=[1, 4], dir=str(tmp_path / "cand"), warmup=False)
    assert len(reply["ms"]) == 6 and all(x > 0 for x in reply["ms"])
    assert reply["host_ms"] == reply["ms"] == reply["full_ms"]  # the CPU has one clock
    assert len(reply["issue_ms"]) == 6 and all(0 < i <= h for i, h in zip(reply["issue_ms"], reply["host_ms"]))
    assert reply["wall_ms"] >= sum(reply["ms"])
    # Call i draws from seed mix(seed_base, i), reported so the reference can make the same inputs.
    seeds = [mix(100000, 1), mix(100000, 4)]
    assert [c["seed"] for c in reply["checked"]] == seeds
    assert reply["findings"] == []
    ref = start_runner("reference")
    load(ref, reference)
    expected = ref.ok("expected", seeds=seeds, dir=str(tmp_path / "ref"))["results"]
    for check, exp in zip(reply["checked"], expected):
        assert check["path"].endswith(f"time-{check['seed']}.pt")
        assert check["findings"] == []
        cmp = ref.ok("compare", expected=exp["path"], actual=check["path"], atol=1e-5, rtol=1e-5)
        assert cmp["load_error"] is None
        (out,) = cmp["outputs"]
        assert out["numel"] == 32 and out["mismatches"] == 0 and out["max_abs"] == 0.0
    # Different calls saw different inputs.
    a = torch.load(reply["checked"][0]["path"], weights_only=True)["outputs"][0]
    b = torch.load(reply["checked"][1]["path"], weights_only=True)["outputs"][0]
    assert not torch.equal(a, b)


def test_warmup_reports_only_issue_times_and_writes_nothing(start_runner, reference, tmp_path):
    ref = start_runner("reference")
    load(ref, reference)
    out_dir = tmp_path / "warm"
    reply = ref.ok("time", calls=3, seed_base=7, check=[0], dir=str(out_dir), warmup=True)
    assert reply["ms"] == [] and reply["host_ms"] == [] and reply["checked"] == []
    assert len(reply["issue_ms"]) == 3  # they size the GPU spin
    assert not out_dir.exists()


def test_a_spin_is_ignored_on_the_cpu_and_a_bad_one_is_a_bad_request(start_runner, reference, tmp_path):
    ref = start_runner("reference")
    load(ref, reference)
    reply = ref.ok("time", calls=2, seed_base=5, spin_us=50.0)
    assert len(reply["ms"]) == 2 and reply["ms"] == reply["full_ms"]
    for bad in (-1, 1e9, "50", True):
        err = ref.error("time", calls=1, seed_base=5, spin_us=bad)
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
    checked = cand.ok("time", calls=3, seed_base=40, check=[2], dir=str(tmp_path / "c"))["checked"]
    ref = start_runner("reference")
    load(ref, reference)
    (exp,) = ref.ok("expected", seeds=[mix(40, 2)], dir=str(tmp_path / "r"))["results"]
    cmp = ref.ok("compare", expected=exp["path"], actual=checked[0]["path"], atol=1e-5, rtol=1e-5)
    assert cmp["outputs"][0]["mismatches"] > 0


def test_time_check_calls_report_output_findings(start_runner, write, reference, tmp_path):
    candidate = write(
        "alias.py",
        SAME_CANDIDATE.replace("return torch.relu(self.lin(x)) * self.scale", "return x"),
    )
    cand = start_runner("candidate")
    load(cand, reference, candidate)
    checked = cand.ok("time", calls=2, seed_base=1, check=[0], dir=str(tmp_path))["checked"]
    assert [f["kind"] for f in checked[0]["findings"]] == ["output_aliases_input"]


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
    reply = cand.ok("time", calls=3, seed_base=5, check=[2], dir=str(tmp_path / "t"), warmup=False)
    (timed,) = torch.load(reply["checked"][0]["path"], weights_only=True)["outputs"]
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
    reply = cand.ok("time", calls=3, seed_base=5, check=[0, 2], dir=str(tmp_path / "t"), cpu=core)
    for check in reply["checked"]:
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
    reply = cand.ok("time", calls=3, seed_base=5, check=[1, 2], dir=str(tmp_path / "t"), cpu=core)
    assert [f["kind"] for f in reply["findings"]] == ["affinity_changed"]
    assert f"core {core}" in reply["findings"][0]["detail"]
    # Each call starts back on the core although the one before moved the thread away.
    for check in reply["checked"]:
        (timed,) = torch.load(check["path"], weights_only=True)["outputs"]
        assert torch.all(timed == float(core))


def test_a_core_that_is_not_a_number_is_a_bad_request(start_runner, reference, tmp_path):
    ref = start_runner("reference")
    load(ref, reference)
    err = ref.error("time", calls=1, seed_base=5, cpu="3")
    assert err["kind"] == "bad_request" and "`cpu`" in err["message"]
