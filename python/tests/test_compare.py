"""`compare` in the reference role: float64 statistics, mismatches, refusal of foreign files."""

import os
import pickle

import pytest
import torch


@pytest.fixture
def ref(start_runner):
    return start_runner("reference")


def _save(tmp_path, name, tensors):
    path = tmp_path / name
    torch.save({"outputs": tensors}, path)
    return str(path)


def _compare(ref, expected, actual, atol=1e-4, rtol=1e-4):
    return ref.ok("compare", expected=expected, actual=actual, atol=atol, rtol=rtol)


def _base():
    torch.manual_seed(0)
    return torch.randn(64, 32)


def test_equal_outputs(ref, tmp_path):
    e = _base()
    reply = _compare(ref, _save(tmp_path, "e.pt", [e]), _save(tmp_path, "a.pt", [e.clone()]))
    assert reply["count_expected"] == 1 and reply["count_actual"] == 1 and reply["load_error"] is None
    (out,) = reply["outputs"]
    assert out == {
        "index": 0,
        "expected_shape": [64, 32],
        "actual_shape": [64, 32],
        "expected_dtype": "float32",
        "actual_dtype": "float32",
        "numel": 2048,
        "max_abs": 0.0,
        "max_rel": 0.0,
        "mismatches": 0,
        "nonfinite_mismatches": 0,
        "expected_nonfinite": 0,
        "exact": False,
    }


def test_integer_and_boolean_outputs_must_match_exactly_whatever_the_tolerance(ref, tmp_path):
    # A cumulative sum of large integers: off by one, and accumulated in float32 (off by up to
    # 64 at these magnitudes). A float tolerance of 1e-4 relative would pass both.
    torch.manual_seed(1)
    x = torch.randint(0, 1 << 20, (8, 4096), dtype=torch.int64)
    e = x.cumsum(1)
    off_by_one = e.clone()
    off_by_one[3, 4095] += 1
    float_acc = x.float().cumsum(1).to(torch.int64)
    assert not torch.equal(float_acc, e)
    flags = e % 3 == 0
    flipped = flags.clone()
    flipped[0, 0] = ~flipped[0, 0]
    exp = _save(tmp_path, "e.pt", [e, flags])
    for actual, wrong in (([off_by_one, flags], 1), ([float_acc, flags], int((float_acc != e).sum())), ([e, flipped], 1)):
        reply = _compare(ref, exp, _save(tmp_path, "a.pt", actual), atol=1e-2, rtol=1e-2)
        assert sum(o["mismatches"] for o in reply["outputs"]) == wrong, reply
        assert all(o["exact"] for o in reply["outputs"])
    same = _compare(ref, exp, _save(tmp_path, "same.pt", [e.clone(), flags.clone()]), atol=1, rtol=1)
    assert [o["mismatches"] for o in same["outputs"]] == [0, 0]


def test_the_reply_carries_the_fingerprint_of_the_actual_file(ref, tmp_path):
    from cudal1_runner.capture import capture

    e = _base()
    captured = capture((e * 2, 3))
    path = _save(tmp_path, "a.pt", captured.host())
    reply = _compare(ref, _save(tmp_path, "e.pt", [e * 2, torch.tensor(3)]), path)
    assert reply["fingerprint"] == captured.fingerprint(True)
    other = _compare(ref, path, _save(tmp_path, "b.pt", [e * 2 + 1e-6, torch.tensor(3)]))
    assert other["fingerprint"] != captured.fingerprint(True)


def test_slightly_off_within_tolerance(ref, tmp_path):
    e = _base()
    a = e + 3e-6
    reply = _compare(ref, _save(tmp_path, "e.pt", [e]), _save(tmp_path, "a.pt", [a]))
    (out,) = reply["outputs"]
    diff = (a.double() - e.double()).abs()
    assert out["mismatches"] == 0
    assert out["max_abs"] == pytest.approx(float(diff.max()), rel=1e-12)
    assert out["max_rel"] == pytest.approx(float((diff / (e.double().abs() + 1e-12)).max()), rel=1e-12)


def test_off_beyond_tolerance_counts_mismatches(ref, tmp_path):
    e = _base()
    a = e.clone()
    a[0, 0] += 1.0
    a[5, 7] -= 0.5
    a[63, 31] += 2e-3
    a[10, 10] += 1e-6  # within tolerance
    (out,) = _compare(ref, _save(tmp_path, "e.pt", [e]), _save(tmp_path, "a.pt", [a]))["outputs"]
    assert out["mismatches"] == 3
    assert out["max_abs"] == pytest.approx(1.0, rel=1e-6)
    # The same files with a loose tolerance: only the two large errors remain.
    (loose,) = _compare(ref, str(tmp_path / "e.pt"), str(tmp_path / "a.pt"), atol=1e-2, rtol=0)["outputs"]
    assert loose["mismatches"] == 2


def test_shape_mismatch_has_no_errors(ref, tmp_path):
    e = _base()
    (out,) = _compare(ref, _save(tmp_path, "e.pt", [e]), _save(tmp_path, "a.pt", [e.t().contiguous()]))["outputs"]
    assert out["expected_shape"] == [64, 32] and out["actual_shape"] == [32, 64]
    assert out["numel"] == 0 and out["max_abs"] is None and out["max_rel"] is None


def test_dtype_mismatch_is_reported_and_values_still_compared(ref, tmp_path):
    e = _base()
    a = e.to(torch.float16)
    (out,) = _compare(ref, _save(tmp_path, "e.pt", [e]), _save(tmp_path, "a.pt", [a]))["outputs"]
    assert out["expected_dtype"] == "float32" and out["actual_dtype"] == "float16"
    assert out["numel"] == 2048
    assert out["max_abs"] == pytest.approx(float((a.double() - e.double()).abs().max()), rel=1e-12)
    assert out["max_abs"] > 0


def test_nan_where_finite_was_expected(ref, tmp_path):
    e = _base()
    a = e.clone()
    a[1, 1] = float("nan")
    a[2, 2] = float("inf")
    e2 = e.clone()
    e2[3, 3] = float("nan")
    a2 = e2.clone()  # NaN in both places: agreement
    a2[4, 4] = -float("inf")
    reply = _compare(ref, _save(tmp_path, "e.pt", [e, e2]), _save(tmp_path, "a.pt", [a, a2]))
    first, second = reply["outputs"]
    assert first["nonfinite_mismatches"] == 2 and first["expected_nonfinite"] == 0
    assert first["mismatches"] == 0 and first["max_abs"] == 0.0
    assert second["nonfinite_mismatches"] == 1 and second["expected_nonfinite"] == 1


def test_counts_when_the_candidate_returns_more_outputs(ref, tmp_path):
    e = _base()
    reply = _compare(ref, _save(tmp_path, "e.pt", [e]), _save(tmp_path, "a.pt", [e, e]))
    assert reply["count_expected"] == 1 and reply["count_actual"] == 2
    assert len(reply["outputs"]) == 1


def test_a_file_that_is_not_a_torch_file(ref, tmp_path):
    expected = _save(tmp_path, "e.pt", [_base()])
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00not a torch file at all\xff" * 10)
    reply = _compare(ref, expected, str(garbage))
    assert reply["outputs"] == [] and reply["count_actual"] == 0
    assert isinstance(reply["load_error"], str) and reply["load_error"]
    missing = _compare(ref, expected, str(tmp_path / "absent.pt"))
    assert missing["load_error"]
    wrong_layout = tmp_path / "dict.pt"
    torch.save({"outputs": "a string"}, wrong_layout)
    assert "not a list" in _compare(ref, expected, str(wrong_layout))["load_error"]


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_pickle_with_code_is_refused_not_executed(ref, tmp_path):
    expected = _save(tmp_path, "e.pt", [_base()])
    marker = tmp_path / "executed"
    hostile = tmp_path / "hostile.pt"
    torch.save({"outputs": [_Payload(str(marker))]}, hostile, pickle_module=pickle)
    reply = _compare(ref, expected, str(hostile))
    assert reply["load_error"]
    assert not marker.exists()


def test_unreadable_expected_file_is_an_error(ref, tmp_path):
    actual = _save(tmp_path, "a.pt", [_base()])
    err = ref.error("compare", expected=str(tmp_path / "absent.pt"), actual=actual, atol=0, rtol=0)
    assert err["kind"] == "internal"
