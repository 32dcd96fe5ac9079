"""A call's output, captured before any candidate code can run again.

Between a call's return and the moment its output is saved or compared, nothing the candidate
wrote may run: not an instance's or a metaclass's ``__getattribute__``, not a container's
``__iter__``, not a global ``TorchFunctionMode`` or ``TorchDispatchMode``. Otherwise an output
could be filled in just in time, only when it is about to be checked. So the capture

- walks the output with the C functions of ``type``, ``list`` and ``tuple`` (bound when this
  module is imported), never with attribute lookups on the candidate's objects;
- copies each plain tensor with ``TensorBase`` methods (an immutable C type) while torch function
  handling (modes included) and Python dispatch are switched off;
- fingerprints the copies: a digest that the trusted reference process can recompute from a
  saved file, so that an output revealed later is known to be the one captured right after its
  call (docs/protocol.md, ``reveal``).

Tensors (a subclass as the plain data it holds) and plain Python numbers are copied; anything
else is kept as an empty placeholder (its finding comes from ``outputs.output_findings``).
"""

import hashlib

import torch

from .errors import OOM, RUNTIME_ERROR, RunnerError, is_oom
from .inputs import device_key, device_sums, key_text

_type = type
_issubclass = issubclass
_list_iter = list.__iter__
_tuple_iter = tuple.__iter__
_Tensor = torch.Tensor
_Base = torch._C.TensorBase
_clone = _Base.clone
_detach = _Base.detach
_reshape = _Base.reshape
_view = _Base.view
_to = _Base.to
_contiguous = _Base.contiguous
_numel = _Base.numel
_element_size = _Base.element_size
_is_floating = _Base.is_floating_point
_is_complex = _Base.is_complex
_isnan = _Base.isnan
_eq = _Base.eq
_all = _Base.all
_or = _Base.logical_or
_numpy = _Base.numpy
_size = _Base.size
_dtype_of = _Base.dtype.__get__
_device_of = _Base.device.__get__
_equal = torch.equal
_CONTIGUOUS = torch.contiguous_format
_STRIDED = torch.strided
_storage_ptr = torch._C.StorageBase.data_ptr
_storage_nbytes = torch._C.StorageBase.nbytes
_UINT8 = torch.uint8
_NO_FUNCTION = torch._C.DisableTorchFunction
_NO_DISPATCH = torch._C._DisableTorchDispatch
_NUMBERS = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}
_tensor = torch.tensor
_empty = torch.empty
_sha256 = hashlib.sha256
_qualname = type.__dict__["__qualname__"].__get__


class _Quiet:
    """No torch function handling, no Python dispatch: the candidate's modes see nothing."""

    __slots__ = ("_guards",)

    def __enter__(self):
        self._guards = (_NO_FUNCTION(), _NO_DISPATCH())
        for g in self._guards:
            g.__enter__()
        return self

    def __exit__(self, *exc):
        for g in reversed(self._guards):
            g.__exit__(None, None, None)
        return False


def quiet() -> _Quiet:
    return _Quiet()


def leaves(output) -> list:
    """The output as a flat list, walked without calling any of the candidate's methods."""
    kind = _type(output)
    if kind is list or kind is tuple or _issubclass(kind, (list, tuple)):
        items = _list_iter(output) if _issubclass(kind, list) else _tuple_iter(output)
        flat = []
        for item in items:
            flat.extend(leaves(item))
        return flat
    return [output]


class Captured:
    """Copies of one call's outputs (plain tensors on the call's device, or placeholders)."""

    __slots__ = ("copies", "nbytes")

    def __init__(self, copies: list) -> None:
        self.copies = copies
        with quiet():
            self.nbytes = sum(_numel(c) * _element_size(c) for c in copies)

    def host(self) -> list:
        """CPU copies, ready to save."""
        with quiet():
            return [_to(c, "cpu") for c in self.copies]

    def fingerprint(self, strong: bool) -> str:
        return fingerprint(self.copies, strong)

    def fingerprint_later(self) -> "Pending":
        """The GPU fingerprint with its sums left on the device: ``resolve`` finishes many at
        once, with one synchronisation instead of two per call."""
        headers, sums = [], []
        with quiet():
            for t in self.copies:
                headers.append(_header(t))
                if _numel(t) == 0:
                    sums.append(None)
                else:
                    sums.append(device_sums(_view(_reshape(_contiguous(t), (-1,)), _UINT8)))
        return Pending(headers, sums)


    def differs_from(self, output) -> bool:
        """Whether the output's tensors now hold other values than were captured: something
        wrote them after the call returned (a fill done just in time, or work the call did not
        wait for)."""
        with quiet():
            for copy, leaf in zip(self.copies, leaves(output)):
                if _type(leaf) is not _Tensor:
                    continue
                try:
                    if _size(copy) != _size(leaf) or _dtype_of(copy) != _dtype_of(leaf):
                        continue
                    if _is_floating(copy) or _is_complex(copy):
                        same = bool(_all(_or(_eq(copy, leaf), _Base.logical_and(_isnan(copy), _isnan(leaf)))))
                    else:
                        same = _equal(copy, leaf)
                except Exception:
                    continue
                if not same:
                    return True
        return False


class Pending:
    __slots__ = ("headers", "sums")

    def __init__(self, headers: list, sums: list) -> None:
        self.headers = headers
        self.sums = sums


def resolve(pending: list) -> list:
    """The fingerprints of ``fingerprint_later`` results, as ``fingerprint(.., strong=False)``
    gives them."""
    stacked = [s for p in pending for _, s in (x for x in p.sums if x is not None)]
    with quiet():
        values = iter(torch.stack(stacked).tolist() if stacked else [])
    out = []
    for p in pending:
        h = _sha256()
        for header, part in zip(p.headers, p.sums):
            h.update(header.encode())
            if part is not None:
                plain, weighted = next(values)
                h.update(key_text(part[0], plain, weighted))
        out.append(h.hexdigest()[:32])
    return out


def _header(t) -> str:
    return f"{str(_dtype_of(t))}{list(_size(t))};"

def _has_data(t) -> bool:
    """Whether a tensor subclass holds real memory (a ``__torch_dispatch__`` wrapper does not)."""
    if _Base.is_meta.__get__(t) or _Base.layout.__get__(t) != _STRIDED:
        return False
    storage = _Base.untyped_storage(t)
    return _storage_nbytes(storage) == 0 or _storage_ptr(storage) != 0


def capture(output, strict: bool = False) -> Captured:
    """Copies of the output's leaves, made with the candidate's code unable to run.

    ``strict`` (the trusted reference): a leaf that cannot be copied raises instead."""
    copies = []
    with quiet():
        for index, leaf in enumerate(leaves(output)):
            kind = _type(leaf)
            if kind is _Tensor or _issubclass(kind, _Tensor):
                # A subclass is copied as the plain data it holds, if any: with its torch
                # function and dispatch switched off, none of its methods run.
                try:
                    if kind is not _Tensor and not _has_data(leaf):
                        raise ValueError("a wrapper without storage")  # cloning one would crash
                    copy = _clone(_detach(leaf), memory_format=_CONTIGUOUS)
                    if _type(copy) is not _Tensor:
                        copy = _Base.as_subclass(copy, _Tensor)
                    if not _Base.is_meta.__get__(copy) and _Base.layout.__get__(copy) == _STRIDED:
                        copies.append(copy)
                        continue
                except Exception as exc:
                    # No room for the copy (other jobs hold the device) is no fault of the
                    # output's: said as out-of-memory, so the engine judges the job again
                    # holding the device alone instead of comparing an empty stand-in.
                    if is_oom(exc):
                        raise RunnerError(OOM, f"output {index} cannot be copied: {_type(exc).__name__}: {exc}") from None
            elif kind in _NUMBERS:
                copies.append(_tensor(leaf, dtype=_NUMBERS[kind]))
                continue
            if strict:
                raise RunnerError(RUNTIME_ERROR, f"output {index} cannot be saved: it is {_qualname(kind)}")
            copies.append(_empty(0))
    return Captured(copies)


def fingerprint(tensors: list, strong: bool, device=None) -> str:
    """A digest of the tensors' dtypes, shapes and bytes, the same in every process.

    ``strong`` (CPU evaluations): SHA-256 of the bytes. Otherwise the position-weighted sums of
    ``inputs.device_key``, computed on the tensors' device (a GPU output of ~1 GB would take
    seconds to hash on the host); ``device``, if given, is where those sums are computed.
    """
    h = _sha256()
    with quiet():
        for t in tensors:
            h.update(_header(t).encode())
            if _numel(t) == 0:
                continue
            data = _view(_reshape(_contiguous(t), (-1,)), _UINT8)
            if strong:
                if _device_of(data).type != "cpu":
                    data = _to(data, "cpu")
                h.update(memoryview(_numpy(data)))
            else:
                h.update(device_key(data if device is None else _to(data, device)))
    return h.hexdigest()[:32]
