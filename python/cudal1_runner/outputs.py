"""Model outputs: flattening, the candidate's findings, and the ``.pt`` files.

A finding is a fact about an output that correctness alone would miss: a lazy tensor subclass,
storage shared with an input, an input edited in place, a tensor without real storage, an output
on the wrong device. Findings never raise; the Rust side decides what they mean.
"""

import contextlib
import os

import torch

from .errors import RUNTIME_ERROR, RunnerError
from .inputs import tensors

NOT_TENSOR = "output_not_tensor"
ALIASES_INPUT = "output_aliases_input"
INPUT_MUTATED = "input_mutated"
NO_STORAGE = "output_no_storage"
WRONG_DEVICE = "output_wrong_device"
NOT_READY = "output_not_ready"

_NUMBERS = (bool, int, float, complex)


def _finding(kind: str, detail: str) -> dict:
    return {"kind": kind, "detail": detail}


def _plain_view():
    """Inspect subclasses without running their ``__torch_function__`` overrides."""
    guard = getattr(torch._C, "DisableTorchFunctionSubclass", None)
    return guard() if guard is not None else contextlib.nullcontext()


def leaves(output) -> list:
    """The output as a flat list: tensors, numbers, and anything else as found."""
    if isinstance(output, (list, tuple)):
        flat = []
        for item in output:
            flat.extend(leaves(item))
        return flat
    return [output]


def _storage_range(t: torch.Tensor):
    """(start, end) of the bytes a tensor's storage spans, or None when it has none."""
    try:
        with _plain_view():
            if t.is_meta or t.layout != torch.strided:
                return None
            storage = t.untyped_storage()
            start, size = storage.data_ptr(), storage.nbytes()
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
            input_ranges.append((index, t.device, r))
    for index, out in enumerate(flat):
        if isinstance(out, _NUMBERS) and not isinstance(out, torch.Tensor):
            continue
        if not isinstance(out, torch.Tensor):
            found.append(_finding(NOT_TENSOR, f"output {index} is {type(out).__name__}, not a tensor"))
            continue
        if type(out) is not torch.Tensor:
            found.append(_finding(NOT_TENSOR, f"output {index} is {type(out).__qualname__}, a torch.Tensor subclass"))
        with _plain_view():
            out_device = out.device
            is_meta = out.is_meta
            layout = out.layout
        if out_device.type != device.type:
            found.append(_finding(WRONG_DEVICE, f"output {index} is on {out_device}, expected {device.type}"))
        r = _storage_range(out)
        if r is None:
            why = "a meta tensor" if is_meta else f"layout {layout}" if layout != torch.strided else "no data pointer"
            found.append(_finding(NO_STORAGE, f"output {index} has no real storage ({why})"))
            continue
        for input_index, input_device, ir in input_ranges:
            if input_device == out_device and r[0] < ir[1] and ir[0] < r[1]:
                found.append(_finding(ALIASES_INPUT, f"output {index} shares storage with input {input_index}"))
    return found


def early_copies(output) -> list:
    """Copies of the output's tensors made on the current stream as soon as the call returns.

    They are ordered after everything the candidate queued on the caller's stream, and after
    nothing else: a copy that differs from the output after the device is synchronised shows that
    the output was still being written by work on another stream (or thread) that the call did
    not wait for. A caller using the output on its own stream would read it half-written.
    """
    copies = []
    for out in leaves(output):
        try:
            with _plain_view():
                copies.append(out.detach().clone() if isinstance(out, torch.Tensor) else None)
        except Exception:
            copies.append(None)
    return copies


def readiness_findings(early: list, flat: list) -> list:
    for index, (copy, out) in enumerate(zip(early, flat)):
        if copy is None or not isinstance(out, torch.Tensor):
            continue
        try:
            with _plain_view():
                same = _same_tensor(out.detach(), copy)
        except Exception:
            continue
        if not same:
            return [_finding(NOT_READY, f"output {index} was still being written when the call returned (work on another stream or thread that the call did not wait for)")]
    return []


def mutation_findings(inputs, clones) -> list:
    found = []
    _compare_inputs(inputs, clones, "", found)
    return found


def _compare_inputs(now, before, path: str, found: list) -> None:
    if isinstance(before, (list, tuple)):
        if not isinstance(now, (list, tuple)) or len(now) != len(before):
            found.append(_finding(INPUT_MUTATED, f"input {path or 'list'} changed its structure"))
            return
        for i, (a, b) in enumerate(zip(now, before)):
            _compare_inputs(a, b, f"{path}[{i}]" if path else str(i), found)
        return
    if isinstance(before, torch.Tensor):
        if not _same_tensor(now, before):
            found.append(_finding(INPUT_MUTATED, f"input {path} was modified in place"))


def _same_tensor(now, before: torch.Tensor) -> bool:
    if not isinstance(now, torch.Tensor) or now.shape != before.shape or now.dtype != before.dtype:
        return False
    if now.device != before.device:
        return False
    if before.is_floating_point() or before.is_complex():
        # NaN-aware: a NaN that stays NaN is no mutation.
        same = (now == before) | (torch.isnan(now) & torch.isnan(before))
        return bool(same.all())
    return torch.equal(now, before)


def to_host(flat: list, strict: bool):
    """CPU tensors to save, and findings for leaves that could not be materialised.

    A leaf that cannot be copied is saved as an empty tensor, so ``compare`` sees a shape mismatch.

    ``strict`` (the trusted reference) raises instead of substituting an empty placeholder.
    """
    saved, found = [], []
    for index, out in enumerate(flat):
        try:
            saved.append(_host_tensor(out, index))
        except Exception as exc:
            if strict:
                raise RunnerError(RUNTIME_ERROR, f"output {index} cannot be saved: {exc}") from exc
            saved.append(torch.empty(0))
            # Non-tensors and storage-less tensors are already reported by output_findings.
            if isinstance(out, torch.Tensor) and _storage_range(out) is not None:
                found.append(_finding(NO_STORAGE, f"output {index} could not be copied to the host: {exc}"))
    return saved, found


def _host_tensor(out, index: int) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        # A fresh compact CPU tensor: saving a view would save its whole base storage, and a
        # subclass would not load under weights_only.
        with _plain_view():
            shape, dtype = out.shape, out.dtype
        host = torch.empty(shape, dtype=dtype, device="cpu")
        host.copy_(out)
        return host
    if isinstance(out, bool):
        return torch.tensor(out)
    if isinstance(out, int):
        return torch.tensor(out, dtype=torch.int64)
    if isinstance(out, float):
        return torch.tensor(out, dtype=torch.float64)
    if isinstance(out, complex):
        return torch.tensor(out, dtype=torch.complex128)
    raise TypeError(f"output {index} is {type(out).__name__}")


def save(path: str, saved: list) -> None:
    """Write atomically so a reader never sees half a file."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    partial = f"{path}.partial"
    torch.save({"outputs": saved}, partial)
    os.replace(partial, path)

