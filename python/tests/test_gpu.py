"""GPU behaviour; skipped where CUDA is not available (the CPU CI), run on a GPU machine."""

import pytest
import torch

from cudal1_runner import PROTOCOL_VERSION
from conftest import REFERENCE, SAME_CANDIDATE, load


pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _saved(path):
    return torch.load(path, weights_only=True)["outputs"]


def test_hello_lists_the_devices(start_runner):
    reply = start_runner("reference").ok("hello")
    assert reply["cuda"] == torch.version.cuda
    assert len(reply["devices"]) == torch.cuda.device_count()
    first = reply["devices"][0]
    props = torch.cuda.get_device_properties(0)
    assert first["name"] == props.name and first["capability"] == f"{props.major}.{props.minor}"
    assert first["memory_bytes"] == props.total_memory and first["l2_bytes"] > 0
    assert isinstance(reply["driver"], str) and reply["driver"][0].isdigit()


def test_gpu_outputs_match_across_roles_and_time_runs(start_runner, write, reference, tmp_path):
    candidate = write("same.py", SAME_CANDIDATE)
    ref, cand = start_runner("reference"), start_runner("candidate")
    load(ref, reference, device="cuda:0")
    load(cand, reference, candidate, device="cuda:0")
    want = ref.ok("expected", seeds=[1, 2], dir=str(tmp_path / "r"))["results"]
    got = cand.ok("outputs", seeds=[1, 2], dir=str(tmp_path / "c"))["results"]
    for g, w in zip(got, want):
        assert g["findings"] == [] and g["input_digest"] == w["input_digest"]
        assert torch.equal(_saved(g["path"])[0], _saved(w["path"])[0])
        assert _saved(g["path"])[0].device.type == "cpu"
    seeds = list(range(500, 520))
    reply = cand.ok("time", seeds=seeds, flush_l2=True, keep_bytes=1 << 30)
    assert len(reply["ms"]) == 20 and all(m > 0 for m in reply["ms"])
    assert all(h > 0 for h in reply["host_ms"])
    assert reply["kept"] == 20
    (checked,) = cand.ok("reveal", calls=[19], dir=str(tmp_path / "c"))["checked"]
    (exp,) = ref.ok("expected", seeds=[519], dir=str(tmp_path / "r"))["results"]
    cmp = ref.ok("compare", expected=exp["path"], actual=checked["path"], atol=0, rtol=0)
    assert cmp["outputs"][0]["mismatches"] == 0
    # The reference recomputes the GPU fingerprint (position-weighted sums) of the revealed file.
    assert cmp["fingerprint"] == reply["fingerprints"][19]


def test_expected_reports_the_references_device_peak_for_admission(start_runner, write, tmp_path):
    """``device_peak_bytes`` (version 3): what the reference's allocator held since its task
    loaded, its kept expected outputs included; a task loaded after it starts from nothing."""
    big = write("big.py", (
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return x * 2\n\n\n"
        "def get_inputs():\n    return [torch.randn(64 << 20)]\n\n\ndef get_init_inputs():\n    return []\n"
    ))
    small = write("small.py", open(big).read().replace("64 << 20", "1 << 10"))
    ref = start_runner("reference")
    load(ref, big, device="cuda:0")
    reply = ref.ok("expected", seeds=[1], dir=str(tmp_path / "r"), share_bytes=1 << 30)
    # Its input and its kept output are 256 MiB each.
    assert reply["device_peak_bytes"] >= 512 << 20, reply["device_peak_bytes"]
    ref.ok("release")
    load(ref, small, device="cuda:0")
    reply = ref.ok("expected", seeds=[1], dir=str(tmp_path / "s"))
    assert reply["device_peak_bytes"] < 64 << 20, reply["device_peak_bytes"]


def test_outputs_handed_over_on_the_device_compare_like_files(start_runner, write, reference, tmp_path):
    """``share_bytes``: the reference keeps its expected outputs, the candidate exports its own
    (CUDA IPC); the comparison and the fingerprint are those of the saved files."""
    candidate = write("same.py", SAME_CANDIDATE)
    ref, cand = start_runner("reference"), start_runner("candidate")
    load(ref, reference, device="cuda:0")
    load(cand, reference, candidate, device="cuda:0")
    (kept,) = ref.ok("expected", seeds=[3], dir=str(tmp_path / "r"), share_bytes=1 << 30)["results"]
    assert kept["kept"] is True and "path" not in kept and kept["nbytes"] > 0
    (shared,) = cand.ok("outputs", seeds=[3], dir=str(tmp_path / "c"), share_bytes=1 << 30)["results"]
    assert "path" not in shared and len(shared["shared"]) == 1 and shared["nbytes"] == kept["nbytes"]
    cmp = ref.ok("compare", expected={"kept": 3}, actual={"shared": shared["shared"]}, atol=0, rtol=0)
    assert cmp["load_error"] is None and cmp["outputs"][0]["mismatches"] == 0
    assert cmp["fingerprint"] == shared["fingerprint"]
    (filed,) = cand.ok("outputs", seeds=[3], dir=str(tmp_path / "c"))["results"]
    assert ref.ok("compare", expected={"kept": 3}, actual=filed["path"], atol=0, rtol=0)["outputs"][0]["mismatches"] == 0

    # Claims the reference checks before it reads a byte.
    entry = shared["shared"][0]
    lies = {
        # Far beyond any segment of the caching allocator (within one, the memory is the candidate's own).
        "a size beyond the allocation": {**entry, "shape": [1 << 30, *entry["shape"][1:]]},
        "an offset beyond the allocation": {**entry, "offset": entry["offset"] + (1 << 40)},
        "a forged handle": {**entry, "handle": "00" * 64},
        "an unknown dtype": {**entry, "dtype": "object"},
    }
    for why, lie in lies.items():
        reply = ref.ok("compare", expected={"kept": 3}, actual={"shared": [lie]}, atol=0, rtol=0)
        assert reply["load_error"], why
    # Still serving, on a healthy context.
    assert ref.ok("compare", expected={"kept": 3}, actual={"shared": shared["shared"]}, atol=0, rtol=0)["load_error"] is None

    # Exported outputs are released on request; the budget counts what is held.
    assert cand.ok("release")["released_bytes"] == shared["nbytes"]
    small = cand.ok("outputs", seeds=[4, 5], dir=str(tmp_path / "c"), share_bytes=shared["nbytes"])["results"]
    assert "shared" in small[0] and "path" in small[1]
    assert ref.ok("release")["released_bytes"] == kept["nbytes"]
    assert ref.error("compare", expected={"kept": 3}, actual=filed["path"], atol=0, rtol=0)["kind"] == "bad_request"


def test_timed_outputs_are_revealed_on_the_device(start_runner, write, reference, tmp_path):
    candidate = write("same.py", SAME_CANDIDATE)
    ref, cand = start_runner("reference"), start_runner("candidate")
    load(ref, reference, device="cuda:0")
    load(cand, reference, candidate, device="cuda:0")
    reply = cand.ok("time", seeds=[700, 701, 702], flush_l2=True, keep_bytes=1 << 30)
    (checked,) = cand.ok("reveal", calls=[2], dir=str(tmp_path / "c"), share_bytes=1 << 30)["checked"]
    assert "path" not in checked and checked["shared"]
    ref.ok("expected", seeds=[702], dir=str(tmp_path / "r"), share_bytes=1 << 30)
    cmp = ref.ok("compare", expected={"kept": 702}, actual={"shared": checked["shared"]}, atol=0, rtol=0)
    assert cmp["outputs"][0]["mismatches"] == 0 and cmp["fingerprint"] == reply["fingerprints"][2]


def test_output_left_on_the_host_is_reported(start_runner, write, reference, tmp_path):
    candidate = write("host.py", SAME_CANDIDATE.replace("return torch.relu(self.lin(x)) * self.scale", "return (x * 2).cpu()"))
    cand = start_runner("candidate")
    load(cand, reference, candidate, device="cuda:0")
    result = cand.ok("outputs", seeds=[1], dir=str(tmp_path))["results"][0]
    assert [f["kind"] for f in result["findings"]] == ["output_wrong_device"]


HEAVY = """
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            y = x
            for _ in range(20):
                y = y @ x
            return y[:1, :1].clone()

    def get_inputs():
        return [torch.randn(2048, 2048) / 2048 ** 0.5]

    def get_init_inputs():
        return []
"""

# The same work queued on a side stream, returning before it finishes.
SIDE_STREAM = """
    import torch

    class ModelNew(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.side = torch.cuda.Stream()

        def forward(self, x):
            out = torch.zeros(1, 1, device=x.device)
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                y = x
                for _ in range(20):
                    y = y @ x
                out.copy_(y[:1, :1])
            return out
"""


def _median(values):
    return sorted(values)[len(values) // 2]


def test_side_stream_work_is_inside_the_full_window_and_outside_the_call_window(start_runner, write, tmp_path):
    reference = write("heavy.py", HEAVY)
    candidate = write("side.py", SIDE_STREAM)
    ref, cand = start_runner("reference"), start_runner("candidate")
    load(ref, reference, device="cuda:0")
    load(cand, reference, candidate, device="cuda:0")
    ref.ok("time", seeds=[0, 1, 2], warmup=True)
    cand.ok("time", seeds=[0, 1, 2], warmup=True)
    r = ref.ok("time", seeds=list(range(10, 25)), spin_us=200.0)
    c = cand.ok("time", seeds=list(range(10, 25)), spin_us=200.0)
    # The reference's work is all on the caller's stream: both windows hold it.
    assert _median(r["ms"]) > 0.8 * _median(r["full_ms"]), r
    # The candidate returned before its side stream finished: only the full window holds the work.
    assert _median(c["ms"]) < 0.2 * _median(r["ms"]), (r, c)
    assert _median(c["full_ms"]) > 0.5 * _median(r["full_ms"]), (r, c)


TINY = """
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.gelu(x)

    def get_inputs():
        return [torch.randn(1 << 20)]

    def get_init_inputs():
        return []
"""


def test_a_spin_takes_the_hosts_launch_out_of_the_call_window(start_runner, write, tmp_path):
    ref = start_runner("reference")
    load(ref, write("tiny.py", TINY), device="cuda:0")
    ref.ok("time", seeds=list(range(5)), warmup=True)
    plain = ref.ok("time", seeds=list(range(10, 60)))
    spun = ref.ok("time", seeds=list(range(10, 60)), spin_us=100.0)
    # Without a spin the start event fires on an idle GPU before the host has launched anything.
    assert _median(spun["ms"]) < _median(plain["ms"]), (plain, spun)
    assert all(0 < i < h for i, h in zip(spun["issue_ms"], spun["host_ms"]))
    # The host waited for the spin in the synchronisation: its clock holds most of it.
    assert _median(spun["host_ms"]) > 0.05, spun


# The side-stream candidate, joined to the caller's stream before returning: honest.
JOINED = SIDE_STREAM.replace("            return out", "            torch.cuda.current_stream().wait_stream(self.side)\n            return out")


def test_an_output_still_written_by_a_side_stream_is_reported(start_runner, write, tmp_path):
    reference = write("heavy.py", HEAVY)
    found = {}
    for name, source in (("side", SIDE_STREAM), ("joined", JOINED)):
        cand = start_runner("candidate")
        load(cand, reference, write(f"{name}.py", source), device="cuda:0")
        results = cand.ok("outputs", seeds=[1, 2], dir=str(tmp_path / name))["results"]
        found[name] = [f["kind"] for r in results for f in r["findings"]]
    # Each seed whose output was still being written when the call returned is reported (the
    # side stream may win the race on some).
    assert found["side"] and set(found["side"]) == {"output_not_ready"}, found
    assert found["joined"] == [], found


def test_oom_is_reported_as_oom(start_runner, write, reference, tmp_path):
    candidate = write(
        "oom.py",
        SAME_CANDIDATE.replace(
            "return torch.relu(self.lin(x)) * self.scale",
            "return torch.empty(1 << 50, dtype=torch.uint8, device=x.device)",
        ),
    )
    cand = start_runner("candidate")
    load(cand, reference, candidate, device="cuda:0")
    assert cand.error("outputs", seeds=[1], dir=str(tmp_path))["kind"] == "oom"
    assert cand.ok("hello")["protocol"] == PROTOCOL_VERSION


CUDA_CANDIDATE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
__global__ void scale_kernel(const float* x, float* y, float s, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s;
}
__global__ void wild_kernel(float* y) {
    float* p = (float*)0x10;
    p[threadIdx.x] = y[0];
}
torch::Tensor scale(torch::Tensor x, double s) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)s, n);
    return y;
}
torch::Tensor wild(torch::Tensor x) {
    wild_kernel<<<1, 32>>>(x.data_ptr<float>());
    return x.clone();
}
"""
CPP_SRC = "torch::Tensor scale(torch::Tensor x, double s);\\ntorch::Tensor wild(torch::Tensor x);"

ext = load_inline(name="cudal1_test_scale", cpp_sources=[CPP_SRC], cuda_sources=[CUDA_SRC],
                  functions=["scale", "wild"], verbose=False)

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.s = scale
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        if MODE == "wild":
            return ext.wild(x.contiguous())
        return ext.scale(torch.relu(self.lin(x)).contiguous(), self.s)

MODE = "good"
'''


def test_cuda_extension_builds_in_the_compile_role_and_runs_on_the_gpu(start_runner, write, reference, tmp_path):
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "TORCH_CUDA_ARCH_LIST": "9.0"}
    good = write("cuda_good.py", CUDA_CANDIDATE)
    compiler = start_runner("compile", env)
    built = compiler.ok("compile", candidate=good, reference=reference)
    assert built["built"] == ["cudal1_test_scale"], built["log"]

    ref, cand = start_runner("reference"), start_runner("candidate", env)
    load(ref, reference, device="cuda:0")
    load(cand, reference, good, device="cuda:0")
    (want,) = ref.ok("expected", seeds=[4], dir=str(tmp_path / "r"))["results"]
    (got,) = cand.ok("outputs", seeds=[4], dir=str(tmp_path / "c"))["results"]
    cmp = ref.ok("compare", expected=want["path"], actual=got["path"], atol=1e-5, rtol=1e-5)
    assert cmp["outputs"][0]["mismatches"] == 0 and cmp["outputs"][0]["numel"] == 32

    # Same sources, same extension name: the build is reused; this one faults on the device.
    wild = write("cuda_wild.py", CUDA_CANDIDATE.replace('MODE = "good"', 'MODE = "wild"'))
    faulty = start_runner("candidate", env)
    load(faulty, reference, wild, device="cuda:0")
    err = faulty.error("outputs", seeds=[1], dir=str(tmp_path / "w"))
    assert err["kind"] == "cuda_error", err
    assert faulty.ok("hello")["protocol"] == PROTOCOL_VERSION


def _triton_binaries(cache):
    """The kernel binaries in a Triton cache, as cudal1 counts them (``runner::triton_binaries``)."""
    return sorted(p.parent.name + "/" + p.name for p in cache.glob("*/*.cubin"))


@pytest.mark.parametrize("task, solution", [
    ("tasks/level1/8_GELU_Tanh_Formula.py", "solutions/level1/8_GELU_Tanh_Formula/fast_triton.py"),
    ("tests/adversarial/cuda/tasks/level1/2_Light_Gelu_Scale.py",
     "tests/adversarial/cuda/candidates/level1/2_Light_Gelu_Scale/triton_autotuned.py"),
])
def test_triton_kernels_compile_in_the_warmup_call_and_never_in_a_timed_one(start_runner, tmp_path, task, solution):
    """Issue 31, the runner's side of the ``triton_warmup`` phase: the untimed warm-up call that
    cudal1 makes before the checks (a ``time`` request with ``warmup``) is where Triton compiles
    (and autotunes); the checks and the timed blocks after it add no kernel binary to the
    process's Triton cache, the outputs match the reference, and a timed call is a small part of
    the warm-up call, which held the compile."""
    pytest.importorskip("triton")
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    task, solution = str(repo / task), str(repo / solution)
    cache = tmp_path / "triton"
    ref = start_runner("reference")
    cand = start_runner("candidate", {"TRITON_CACHE_DIR": str(cache)})
    load(ref, task, device="cuda:0")
    load(cand, task, solution, device="cuda:0")
    assert _triton_binaries(cache) == [], "nothing compiles at load"

    started = time.perf_counter()
    warm = cand.ok("time", seeds=[7], flush_l2=False, warmup=True, keep_bytes=0)
    warm_ms = (time.perf_counter() - started) * 1e3
    compiled = _triton_binaries(cache)
    # What Triton does while it compiles (its compilers' processes) is the Rust side's to judge.
    assert compiled, ("the warm-up call compiled the kernel", warm["findings"])

    (want,) = ref.ok("expected", seeds=[8], dir=str(tmp_path / "r"))["results"]
    (got,) = cand.ok("outputs", seeds=[8], dir=str(tmp_path / "c"))["results"]
    assert got["findings"] == [], got["findings"]
    cmp = ref.ok("compare", expected=want["path"], actual=got["path"], atol=1e-4, rtol=1e-4)
    assert cmp["outputs"][0]["mismatches"] == 0, cmp
    assert _triton_binaries(cache) == compiled, "a checked call compiled"

    timed = cand.ok("time", seeds=list(range(100, 108)), flush_l2=True, warmup=False, keep_bytes=0)
    assert timed["findings"] == [], timed["findings"]
    assert _triton_binaries(cache) == compiled, "a timed call compiled"
    assert max(timed["ms"]) * 10 < warm_ms, (timed["ms"], warm_ms)
