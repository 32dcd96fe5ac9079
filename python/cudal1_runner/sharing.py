"""Outputs handed to the reference through the device's memory instead of files (CUDA IPC).

At KernelBench's full sizes an output is ~800 MB: copying it to the host, saving it to /dev/shm
and loading it again in the reference took about 3 s per seed on an H100, 50 times the comparison
itself (``bench/io_probe.py``). On a GPU the candidate's runner can instead keep its captured
copies on the device and export them (``export``); the reference maps each one, checks it, copies
it into its own memory and unmaps it at once (``open_copy``).

The exporter is the candidate's process, so what it sends is a claim. The trusted side
(``open_copy``) uses no code of torch's sharing (whose receiver opens shared-memory files named by
the sender); it calls the CUDA driver itself:

- the handle must be 64 bytes, the dtype one it knows, the shape non-negative integers;
- the driver maps the handle, or refuses it (a forged or stale handle): an unreadable output;
- the mapped allocation must hold ``offset + numel * itemsize`` bytes, according to the driver's
  own range of it, so a lying size or offset is refused before any byte is read;
- the bytes are copied into the reference's memory and the mapping is closed before the copy is
  compared, so what is compared is fixed once read.

Every check runs on fresh random input seeds, so another candidate's exported memory never holds
the right answer for this one's inputs; only memory that a process exported can be mapped, and the
reference exports nothing.
"""

import ctypes
import math

import torch

from .inputs import dtype_name

HANDLE_BYTES = 64
_LAZY_ENABLE_PEER_ACCESS = 1


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


_driver = None


def _cuda():
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
        lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_Handle), ctypes.c_uint64]
        lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), _Handle, ctypes.c_uint]
        lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
        _driver = lib
    return _driver


class SharingError(Exception):
    pass


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise SharingError(f"{what} failed (CUDA driver error {rc})")


def _range(ptr: int):
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(_cuda().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)), "cuMemGetAddressRange")
    return base.value, size.value


_DTYPES = {
    dtype_name(d): d
    for d in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
        torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
    )
}


def shareable(copies: list, device: torch.device) -> bool:
    """Whether every copy is a plain contiguous tensor on ``device`` (a CUDA device)."""
    if device.type != "cuda":
        return False
    for t in copies:
        if type(t) is not torch.Tensor or t.device != device or not t.is_contiguous() or dtype_name(t.dtype) not in _DTYPES:
            return False
    return True


def export(t: torch.Tensor) -> dict:
    """The description of a contiguous CUDA tensor that ``open_copy`` maps in another process.
    Raises SharingError where the driver cannot export its memory (an expandable segment)."""
    entry = {"handle": None, "offset": 0, "dtype": dtype_name(t.dtype), "shape": list(t.shape)}
    if t.numel() == 0:
        return entry
    ptr = t.data_ptr()
    base, _ = _range(ptr)
    handle = _Handle()
    _check(_cuda().cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(base)), "cuIpcGetMemHandle")
    entry["handle"] = ctypes.string_at(ctypes.byref(handle), HANDLE_BYTES).hex()
    entry["offset"] = ptr - base
    return entry


class _Bytes:
    """A device pointer as a one-dimensional uint8 array (``__cuda_array_interface__``)."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3, "strides": None}


def _entry(entry) -> tuple:
    if not isinstance(entry, dict):
        raise SharingError(f"a shared output is {type(entry).__name__}, not an object")
    dtype = _DTYPES.get(entry.get("dtype"))
    if dtype is None:
        raise SharingError(f"a shared output has dtype {entry.get('dtype')!r}, which is not one the runner shares")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(type(n) is int and 0 <= n < 1 << 48 for n in shape):
        raise SharingError("a shared output's shape is not a list of non-negative integers")
    offset = entry.get("offset")
    if type(offset) is not int or not 0 <= offset < 1 << 48:
        raise SharingError("a shared output's offset is not a non-negative integer")
    nbytes = math.prod(shape) * dtype.itemsize
    handle = entry.get("handle")
    if nbytes == 0:
        return dtype, shape, None, 0, 0
    if not isinstance(handle, str) or len(handle) != 2 * HANDLE_BYTES:
        raise SharingError("a shared output's handle is not 64 bytes of hex")
    try:
        raw = bytes.fromhex(handle)
    except ValueError:
        raise SharingError("a shared output's handle is not hex") from None
    return dtype, shape, raw, offset, nbytes


def open_copy(entries, device: torch.device) -> list:
    """The reference's own copies of the tensors described by ``entries`` (see the module)."""
    if not isinstance(entries, list):
        raise SharingError("shared outputs are not a list")
    parsed = [_entry(e) for e in entries]
    torch.cuda.synchronize(device)
    out = []
    for dtype, shape, raw, offset, nbytes in parsed:
        if raw is None:
            out.append(torch.empty(shape, dtype=dtype, device=device))
            continue
        handle = _Handle()
        ctypes.memmove(ctypes.byref(handle), raw, HANDLE_BYTES)
        ptr = ctypes.c_uint64()
        _check(_cuda().cuIpcOpenMemHandle_v2(ctypes.byref(ptr), handle, _LAZY_ENABLE_PEER_ACCESS), "opening the shared output (cuIpcOpenMemHandle)")
        try:
            base, size = _range(ptr.value)
            if base != ptr.value or offset + nbytes > size:
                raise SharingError(f"a shared output claims {nbytes} bytes at offset {offset} of an allocation of {size} bytes")
            view = torch.as_tensor(_Bytes(ptr.value + offset, nbytes), device=device)
            copy = view.clone()
            torch.cuda.synchronize(device)
            del view
        finally:
            _cuda().cuIpcCloseMemHandle(ctypes.c_uint64(ptr.value))
        out.append(copy.view(dtype).reshape(shape))
    return out
