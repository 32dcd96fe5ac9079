"""Compare a candidate's saved outputs with the reference's (reference role only).

Floating and complex outputs are compared in float64 (complex128) with the tolerance asked for;
integer and boolean outputs must match exactly, whatever the tolerance (a tolerance meant for
rounding errors would let an off-by-one count pass). Files are read with
``torch.load(weights_only=True)``, which refuses pickled code, so a hostile file is reported
rather than executed. Statistics are computed in chunks to bound memory. The reply carries the
fingerprint of the candidate's file (``capture.fingerprint``), so the Rust side can check that a
revealed output is the one captured after its call.
"""

import sys

import torch

from .capture import fingerprint
from .errors import INTERNAL, RunnerError
from .inputs import dtype_name

_CHUNK = 1 << 22  # elements per float64 chunk: 32 MiB per operand


def read_outputs(path: str) -> list:
    """The ``outputs`` list of a file written by ``outputs.save``; raises ValueError if malformed."""
    # Memory-mapped: a plain load of a ~1 GB output took seconds; the pages are read once, as
    # the comparison goes through them.
    data = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    if not isinstance(data, dict) or "outputs" not in data:
        raise ValueError("not a cudal1 outputs file (no 'outputs' entry)")
    outputs = data["outputs"]
    if not isinstance(outputs, (list, tuple)):
        raise ValueError(f"'outputs' is {type(outputs).__name__}, not a list")
    for index, t in enumerate(outputs):
        if type(t) is not torch.Tensor:
            raise ValueError(f"outputs[{index}] is {type(t).__name__}, not a tensor")
        if t.layout != torch.strided:
            raise ValueError(f"outputs[{index}] has layout {t.layout}")
    return list(outputs)


def compare(expected: dict, actual: dict, atol: float, rtol: float, device=None) -> dict:
    """Compares the expected outputs (``{"file": path}`` or ``{"tensors": [...]}``, the
    reference's own) with a candidate's (``{"file": path}``, or ``{"open": fn}``: a function
    returning the reference's copies of them, ``sharing.open_copy``). The arithmetic runs on
    `device` (the reference's GPU, where a float64 pass over a ~1 GB output takes milliseconds
    instead of seconds), else on the CPU. A candidate's output that cannot be read is reported in
    ``load_error``; an expected one that cannot be, raised (it is ours)."""
    if "tensors" in expected:
        expected = expected["tensors"]
    else:
        try:
            expected = read_outputs(expected["file"])
        except Exception as exc:
            # The expected file is ours; failing to read it is not the candidate's fault.
            raise RunnerError(INTERNAL, f"expected outputs {expected['file']} unreadable: {type(exc).__name__}: {exc}") from exc
    try:
        actual = read_outputs(actual["file"]) if "file" in actual else actual["open"]()
    except Exception as exc:
        return {
            "outputs": [],
            "count_expected": len(expected),
            "count_actual": 0,
            "load_error": f"{type(exc).__name__}: {exc}",
        }
    return {
        "outputs": [compare_tensors(i, e, a, atol, rtol, device) for i, (e, a) in enumerate(zip(expected, actual))],
        "count_expected": len(expected),
        "count_actual": len(actual),
        "load_error": None,
        "fingerprint": fingerprint(actual, strong=device is None, device=device),
    }


def exact_dtype(dtype: torch.dtype) -> bool:
    """Integer and boolean outputs are compared exactly."""
    return not (dtype.is_floating_point or dtype.is_complex)


def compare_tensors(index: int, expected: torch.Tensor, actual: torch.Tensor, atol: float, rtol: float, device=None) -> dict:
    report = {
        "index": index,
        "expected_shape": list(expected.shape),
        "actual_shape": list(actual.shape),
        "expected_dtype": dtype_name(expected.dtype),
        "actual_dtype": dtype_name(actual.dtype),
        "numel": 0,
        "max_abs": None,
        "max_rel": None,
        "mismatches": 0,
        "nonfinite_mismatches": 0,
        "expected_nonfinite": 0,
        "exact": exact_dtype(expected.dtype),
    }
    if expected.shape != actual.shape:
        return report
    if report["exact"]:
        atol = rtol = 0.0
    wide = torch.complex128 if (expected.is_complex() or actual.is_complex()) else torch.float64
    e_all = expected.reshape(-1)
    a_all = actual.reshape(-1)
    numel = e_all.numel()
    # Maxima over an empty set of non-negative errors are 0: nothing finite disagreed.
    max_abs = max_rel = 0.0
    mismatches = nonfinite = expected_nonfinite = 0
    for start in range(0, numel, _CHUNK):
        e = e_all[start:start + _CHUNK].to(device=device, dtype=wide)
        a = a_all[start:start + _CHUNK].to(device=device, dtype=wide)
        e_finite, a_finite = torch.isfinite(e), torch.isfinite(a)
        both = e_finite & a_finite
        expected_nonfinite += int((~e_finite).sum())
        nonfinite += int((~both & ~_same_nonfinite(e, a)).sum())
        e_b, a_b = e[both], a[both]
        if report["exact"]:
            # In the outputs' own dtypes: float64 cannot tell large int64 values one apart.
            e_n = e_all[start:start + _CHUNK].to(device=device)
            a_n = a_all[start:start + _CHUNK].to(device=device)
            mismatches += int(torch.ne(a_n, e_n).sum())
        if e_b.numel():
            err = (a_b - e_b).abs()
            scale = e_b.abs()
            if not report["exact"]:
                mismatches += int((err > atol + rtol * scale).sum())
            max_abs = max(max_abs, float(err.max()))
            max_rel = max(max_rel, float((err / (scale + 1e-12)).max()))
    report.update(
        numel=numel,
        max_abs=_clamp(max_abs),
        max_rel=_clamp(max_rel),
        mismatches=mismatches,
        nonfinite_mismatches=nonfinite,
        expected_nonfinite=expected_nonfinite,
    )
    return report


def _same_nonfinite(e: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Both NaN, or the same infinity (for complex: the same value, or both containing NaN)."""
    if e.is_complex():
        return (torch.isnan(e) & torch.isnan(a)) | (e == a)
    return (torch.isnan(e) & torch.isnan(a)) | (torch.isinf(e) & (e == a))


def _clamp(x: float) -> float:
    # The difference of two huge finite float64 values can overflow; JSON has no infinity.
    return min(x, sys.float_info.max)
