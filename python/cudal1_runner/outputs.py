"""Model outputs: the candidate's findings, and the ``.pt`` files.

A finding is a fact about an output that correctness alone would miss: a lazy tensor subclass,
storage shared with an input, an input edited in place, a tensor without real storage, an output
on the wrong device, an output written after the call returned. Findings never raise; the Rust
side decides what they mean. Everything here runs with the candidate's torch function and
dispatch modes switched off and reads tensors through ``TensorBase``'s C methods, so inspecting an
output runs none of the candidate's code (see ``capture``).
"""

import os

import torch

from .capture import Captured, capture, leaves, quiet
from .errors import RUNTIME_ERROR, RunnerError
from .inputs import tensors

NOT_TENSOR = "output_not_tensor"
ALIASES_INPUT = "output_aliases_input"
INPUT_MUTATED = "input_mutated"
NO_STORAGE = "output_no_storage"
WRONG_DEVICE = "output_wrong_device"
NOT_READY = "output_not_ready"

_type = type
_issubclass = issubclass
_NUMBERS = (bool, int, float, complex)
_Tensor = torch.Tensor
_Base = torch._C.TensorBase
_device_of = _Base.device.__get__
_dtype_of = _Base.dtype.__get__
# A class's name, read without its metaclass's ``__getattribute__``.
_qualname = type.__dict__["__qualname__"].__get__
_is_meta_of = _Base.is_meta.__get__
_layout_of = _Base.layout.__get__
_untyped_storage = _Base.untyped_storage
_storage_ptr = torch._C.StorageBase.data_ptr
_storage_nbytes = torch._C.StorageBase.nbytes
_STRIDED = torch.strided
_save = torch.save
_replace = os.replace


def _finding(kind: str, detail: str) -> dict:
    return {"kind": kind, "detail": detail}


def _storage_range(t: torch.Tensor):
    """(start, end) of the bytes a tensor's storage spans, or None when it has none."""
    try:
        with quiet():
            if _is_meta_of(t) or _layout_of(t) != _STRIDED:
                return None
            storage = _untyped_storage(t)
            start, size = _storage_ptr(storage), _storage_nbytes(storage)
    except Exception:
        return None
    if start == 0 and size > 0:
        return None
    return (start, start + size)


def output_findings(flat: list, inputs: list, device: torch.device) -> list:
    """Findings about the outputs themselves (no input clones needed)."""
    found = []
    input_ranges = []
    for index, t in enumerate(tensors(inputs)):
        r = _storage_range(t)
        if r is not None and r[1] > r[0]:
            input_ranges.append((index, _device_of(t), r))
    for index, out in enumerate(flat):
        kind = _type(out)
        if kind in _NUMBERS:
            continue
        if not _issubclass(kind, _Tensor):
            found.append(_finding(NOT_TENSOR, f"output {index} is {_qualname(kind)}, not a tensor"))
            continue
        if kind is not _Tensor:
            found.append(_finding(NOT_TENSOR, f"output {index} is {_qualname(kind)}, a torch.Tensor subclass"))
        try:
            with quiet():
                out_device = _device_of(out)
                is_meta = _is_meta_of(out)
                layout = _layout_of(out)
        except Exception as exc:
            found.append(_finding(NO_STORAGE, f"output {index} cannot be inspected ({type(exc).__name__})"))
            continue
        if out_device.type != device.type:
            found.append(_finding(WRONG_DEVICE, f"output {index} is on {out_device}, expected {device.type}"))
        r = _storage_range(out)
        if r is None:
            why = "a meta tensor" if is_meta else f"layout {layout}" if layout != _STRIDED else "no data pointer"
            found.append(_finding(NO_STORAGE, f"output {index} has no real storage ({why})"))
            continue
        for input_index, input_device, ir in input_ranges:
            if input_device == out_device and r[0] < ir[1] and ir[0] < r[1]:
                found.append(_finding(ALIASES_INPUT, f"output {index} shares storage with input {input_index}"))
    return found


def readiness_findings(early: Captured, flat: list) -> list:
    """``early`` was captured as soon as the call returned, on the caller's stream: an output
    that differs from it after the device is synchronised was still being written by work on
    another stream (or thread) that the call did not wait for."""
    if early.differs_from(flat):
        return [_finding(NOT_READY, "an output was still being written when the call returned (work on another stream or thread that the call did not wait for)")]
    return []


def changed_findings(captured: Captured, flat: list) -> list:
    """The output, captured after the call, was written again while the runner inspected it:
    the candidate fills its outputs just in time (from a ``__getattribute__``, a finalizer or a
    mode), only when they are about to be checked."""
    if captured.differs_from(flat):
        return [_finding(NOT_READY, "an output changed after the call had returned, while the runner inspected it: it is filled in just in time, not by the call")]
    return []


def mutation_findings(inputs, clones) -> list:
    found = []
    _compare_inputs(inputs, clones, "", found)
    return found


def _compare_inputs(now, before, path: str, found: list) -> None:
    if _type(before) in (list, tuple):
        if _type(now) is not _type(before) or len(now) != len(before):
            found.append(_finding(INPUT_MUTATED, f"input {path or 'list'} changed its structure"))
            return
        for i, (a, b) in enumerate(zip(now, before)):
            _compare_inputs(a, b, f"{path}[{i}]" if path else str(i), found)
        return
    if _type(before) is _Tensor:
        with quiet():
            same = _same_tensor(now, before)
        if not same:
            found.append(_finding(INPUT_MUTATED, f"input {path} was modified in place"))


def _same_tensor(now, before: torch.Tensor) -> bool:
    # The input may have been given another class (``x.__class__ = ...``): only exact tensors.
    if _type(now) is not _Tensor:
        return False
    if _Base.size(now) != _Base.size(before) or _dtype_of(now) != _dtype_of(before) or _device_of(now) != _device_of(before):
        return False
    return not Captured([before]).differs_from([now])


def save(path: str, saved: list) -> None:
    """Write atomically so a reader never sees half a file."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    partial = f"{path}.partial"
    # Pickling a tensor goes through torch function handling: a mode left active would be
    # handed the runner's own copies.
    with quiet():
        _save({"outputs": saved}, partial)
    _replace(partial, path)

