"""`outputs`/`expected`: determinism across processes, seeds, findings, run-time errors."""

import torch

from cudal1_runner import PROTOCOL_VERSION
from conftest import REFERENCE, SAME_CANDIDATE, load



def _saved(path):
    return torch.load(path, weights_only=True)["outputs"]


def _kinds(result):
    return sorted(f["kind"] for f in result["findings"])


def test_same_program_gives_bitwise_equal_outputs_in_both_roles(start_runner, write, reference, tmp_path):
    candidate = write("same.py", SAME_CANDIDATE)
    ref, cand = start_runner("reference"), start_runner("candidate")
    load(ref, reference)
    load(cand, reference, candidate)
    seeds = [11, 12, 13]
    want = ref.ok("expected", seeds=seeds, dir=str(tmp_path / "ref"))["results"]
    got = cand.ok("outputs", seeds=seeds, dir=str(tmp_path / "cand"))["results"]
    assert [r["seed"] for r in got] == seeds
    for g, w in zip(got, want):
        assert g["path"].endswith(f"seed-{g['seed']}.pt") and g["ms"] >= 0
        assert g["findings"] == [] and w["findings"] == []
        assert g["input_digest"] == w["input_digest"]
        (a,), (e,) = _saved(g["path"]), _saved(w["path"])
        assert a.shape == (4, 8) and a.dtype == torch.float32
        assert torch.equal(a, e)
    # Different seeds gave different outputs (the model is not constant).
    assert not torch.equal(_saved(got[0]["path"])[0], _saved(got[1]["path"])[0])


IDENTITY = """
    import torch

    class Model(torch.nn.Module):
        def forward(self, x, y):
            return x.clone(), y * 1

    def get_inputs():
        return [torch.randn(16), torch.randint(0, 1000, (3, 3))]

    def get_init_inputs():
        return []
"""


def test_two_seeds_give_different_inputs_and_one_seed_the_same(start_runner, write, tmp_path):
    reference = write("identity.py", IDENTITY)
    first, second = start_runner("reference"), start_runner("reference")
    load(first, reference)
    load(second, reference)
    a = first.ok("outputs", seeds=[1, 2, 1], dir=str(tmp_path / "a"))["results"]
    b = second.ok("outputs", seeds=[2], dir=str(tmp_path / "b"))["results"]
    x1, i1 = _saved(a[0]["path"])
    x2, i2 = _saved(a[1]["path"])
    assert not torch.equal(x1, x2) and not torch.equal(i1, i2)
    assert a[0]["input_digest"] != a[1]["input_digest"]
    assert a[0]["input_digest"] == a[2]["input_digest"]
    # Another process with the same seed draws the same inputs.
    assert b[0]["input_digest"] == a[1]["input_digest"]
    assert torch.equal(_saved(b[0]["path"])[0], x2)
    # The inputs are what the seed prescribes.
    torch.manual_seed(1)
    assert torch.equal(x1, torch.randn(16))


def _candidate_with_forward(write, name, body, prelude=""):
    source = f"""
    import torch
    import torch.nn as nn
{prelude}
    class ModelNew(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, x):
{body}
    """
    return write(name, source)


FINDING_CASES = [
    ("subclass", "            return (x * 2).as_subclass(Lazy)",
     "\n    class Lazy(torch.Tensor):\n        pass\n", ["output_not_tensor"]),
    ("returns_input", "            return x", "", ["output_aliases_input"]),
    ("view_of_input", "            return x[1:]", "", ["output_aliases_input"]),
    ("reshaped_input", "            return x.view(-1)", "", ["output_aliases_input"]),
    ("in_place", "            x.mul_(2)\n            return x.clone()", "", ["input_mutated"]),
    ("meta", "            return torch.empty(4, 8, device='meta')", "", ["output_no_storage", "output_wrong_device"]),
    ("string", "            return 'done'", "", ["output_not_tensor"]),
    ("tuple_second_aliases", "            return (x + 1, x[0])", "", ["output_aliases_input"]),
    ("clean", "            return x * 2", "", []),
]


def test_each_finding_kind(start_runner, write, reference, tmp_path):
    for name, body, prelude, expected in FINDING_CASES:
        candidate = _candidate_with_forward(write, f"{name}.py", body, prelude)
        runner = start_runner("candidate")
        load(runner, reference, candidate)
        result = runner.ok("outputs", seeds=[7], dir=str(tmp_path / name))["results"][0]
        assert _kinds(result) == expected, (name, result["findings"])
        if name == "in_place":
            assert "input 0" in result["findings"][0]["detail"]
        if name == "tuple_second_aliases":
            assert "output 1" in result["findings"][0]["detail"]
        # Every case still writes a loadable file of plain tensors.
        saved = _saved(result["path"])
        assert all(type(t) is torch.Tensor for t in saved)
        if name == "subclass":
            torch.manual_seed(7)
            assert torch.equal(saved[0], torch.randn(4, 8) * 2)
        runner.close()


def test_nan_inputs_left_alone_are_not_reported_as_mutated(start_runner, write, tmp_path):
    reference = write(
        "nanin.py",
        """
        import torch
        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.nan_to_num(x)
        def get_inputs():
            x = torch.randn(8)
            x[2] = float("nan")
            return [x]
        def get_init_inputs():
            return []
        """,
    )
    candidate = write(
        "nancand.py",
        """
        import torch
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                return torch.nan_to_num(x)
        """,
    )
    runner = start_runner("candidate")
    load(runner, reference, candidate)
    assert runner.ok("outputs", seeds=[1], dir=str(tmp_path))["results"][0]["findings"] == []


def test_number_outputs_become_0d_tensors(start_runner, write, tmp_path):
    reference = write(
        "scalar.py",
        """
        import torch
        class Model(torch.nn.Module):
            def forward(self, x):
                return float(x.sum()), 3, True
        def get_inputs():
            return [torch.ones(4)]
        def get_init_inputs():
            return []
        """,
    )
    runner = start_runner("reference")
    load(runner, reference)
    path = runner.ok("outputs", seeds=[0], dir=str(tmp_path))["results"][0]["path"]
    f, i, b = _saved(path)
    assert f.shape == () and f.dtype == torch.float64 and float(f) == 4.0
    assert i.dtype == torch.int64 and int(i) == 3
    assert b.dtype == torch.bool and bool(b)


def test_exception_in_forward_is_a_runtime_error_naming_the_seed(start_runner, write, reference, tmp_path):
    candidate = _candidate_with_forward(write, "raises.py", "            raise KeyError('forward broke')")
    runner = start_runner("candidate")
    load(runner, reference, candidate)
    err = runner.error("outputs", seeds=[21, 22], dir=str(tmp_path))
    assert err["kind"] == "runtime_error"
    assert "seed 21" in err["message"] and "forward broke" in err["message"]
    err = runner.error("time", seeds=[50, 51, 52])
    assert err["kind"] == "runtime_error" and "seed 50" in err["message"]
    assert runner.ok("hello")["protocol"] == PROTOCOL_VERSION


def test_out_of_memory_message_is_oom(start_runner, write, reference, tmp_path):
    candidate = _candidate_with_forward(write, "oom.py", "            raise RuntimeError('CUDA out of memory. Tried to allocate 9 GiB')")
    runner = start_runner("candidate")
    load(runner, reference, candidate)
    assert runner.error("outputs", seeds=[1], dir=str(tmp_path))["kind"] == "oom"


def test_cuda_fault_message_is_cuda_error(start_runner, write, reference, tmp_path):
    candidate = _candidate_with_forward(
        write, "fault.py", "            raise RuntimeError('CUDA error: an illegal memory access was encountered')"
    )
    runner = start_runner("candidate")
    load(runner, reference, candidate)
    assert runner.error("outputs", seeds=[1], dir=str(tmp_path))["kind"] == "cuda_error"


def test_get_inputs_turning_bad_at_run_time_is_bad_inputs(start_runner, write, tmp_path):
    reference = write(
        "flaky.py",
        REFERENCE.replace(
            "return [torch.randn(BATCH, N)]",
            "return [torch.randn(BATCH, N)] if torch.initial_seed() == 0 else ['text']",
        ),
    )
    runner = start_runner("reference")
    load(runner, reference)
    err = runner.error("outputs", seeds=[5], dir=str(tmp_path))
    assert err["kind"] == "bad_inputs" and "seed 5" in err["message"]


def test_device_key_tells_apart_contents_orders_and_lengths():
    # The key used for GPU inputs, run here on CPU tensors (integer wrap-around is the same).
    from cudal1_runner.inputs import device_key

    def key(t):
        return device_key(t.contiguous().reshape(-1).view(torch.uint8))

    x = torch.randn(1000)
    assert key(x) == key(x.clone())
    assert key(x) != key(x + 1e-7 * x.abs().max())
    swapped = x.clone()
    swapped[[3, 700]] = swapped[[700, 3]]
    assert key(x) != key(swapped)  # a plain sum would miss a permutation
    assert key(torch.zeros(5)) != key(torch.zeros(6))  # zeros of another length
    odd = torch.arange(7, dtype=torch.uint8)  # not a whole number of 32-bit words
    assert key(odd) != key(torch.cat([odd, odd.new_zeros(1)]))
    big = torch.randint(-2**31, 2**31 - 1, (3 << 20,), dtype=torch.int32)  # overflowing products
    assert key(big) == key(big.clone())
