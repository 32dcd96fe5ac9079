"""Inputs from the reference program, immune to edits made after the snapshot.

The reference module's globals are saved before the candidate is imported. ``get_inputs`` and
``get_init_inputs`` (and the module's other plain functions, which they may call) are rebuilt on
each call from the saved code objects over a fresh dict of fresh copies of the saved globals. A
candidate that rewrites ``N = 4096`` to ``N = 4``, replaces ``get_inputs``, patches its
``__code__``, appends to a module-level list or edits dicts it finds through ``gc`` therefore
changes nothing here. Code in the same process can still reach anything (ctypes, patching torch
itself); ``digest`` lets the Rust side compare the inputs both roles actually used.
"""

import copy
import hashlib
import pickle
import types

import torch

from .errors import BAD_INPUTS, RunnerError

_SCALARS = (bool, int, float)


class _SavedFunction:
    """What is needed to rebuild a module-level function over other globals."""

    __slots__ = ("_parts",)

    def __init__(self, fn: types.FunctionType) -> None:
        # A tuple, so the saved code cannot be swapped by assignment.
        self._parts = (fn.__code__, fn.__name__, _Frozen(fn.__defaults__), _Frozen(fn.__kwdefaults__), fn.__closure__)

    def rebuild(self, globals_: dict) -> types.FunctionType:
        code, name, defaults, kwdefaults, closure = self._parts
        fn = types.FunctionType(code, globals_, name, defaults.thaw(), closure)
        fn.__kwdefaults__ = kwdefaults.thaw()
        return fn


# Immutable, or shared on purpose (modules, classes, functions are identities, not data).
_AS_IS = (type(None), bool, int, float, complex, str, bytes, type, types.ModuleType,
          types.FunctionType, types.BuiltinFunctionType, torch.dtype, torch.device)


class _Frozen:
    """One global's value, kept as pickled bytes so no live object of it can be edited.

    Each ``thaw`` makes a fresh copy. Values that cannot be pickled fall back to a deep copy
    (or, failing that, to the shared object itself).
    """

    __slots__ = ("_parts",)

    def __init__(self, value, shared: bool = False) -> None:
        if shared or isinstance(value, _AS_IS):
            self._parts = ("as_is", value)
            return
        try:
            self._parts = ("pickled", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:
            self._parts = ("copied", _copy_value(value))

    def thaw(self):
        how, payload = self._parts
        if how == "pickled":
            return pickle.loads(payload)
        if how == "copied":
            return _copy_value(payload)
        return payload


def _copy_value(value):
    # Modules, classes and functions deep-copy to themselves; anything that refuses is shared.
    try:
        return copy.deepcopy(value)
    except Exception:
        return value


class InputSource:
    """The reference's ``get_inputs``/``get_init_inputs`` over a snapshot of its globals."""

    def __init__(self, module) -> None:
        namespace = vars(module)
        values, functions = [], []
        for key, value in namespace.items():
            if isinstance(value, types.FunctionType) and value.__globals__ is namespace:
                functions.append((key, _SavedFunction(value)))
            else:
                # Module attributes such as __builtins__ and __spec__ are the interpreter's, not data.
                dunder = key.startswith("__") and key.endswith("__")
                values.append((key, _Frozen(value, shared=dunder)))
        # Tuples rather than dicts: there is no mapping of the globals left to edit.
        self._values = tuple(values)
        self._functions = tuple(functions)

    def _fresh(self) -> dict:
        globals_ = {key: frozen.thaw() for key, frozen in self._values}
        for key, saved in self._functions:
            globals_[key] = saved.rebuild(globals_)
        return globals_

    def get_inputs(self) -> list:
        return _checked(self._fresh()["get_inputs"](), "get_inputs")

    def scale_leading(self, factor: float) -> list:
        """Shrink the task for a trial: module-level integers that give an input's leading
        dimension (KernelBench's ``batch_size``) are multiplied by ``factor`` (at least 1),
        wherever the task uses them. Shapes are read on the meta device, so nothing of the full
        size is allocated. Returns ``name old -> new`` for each integer changed."""
        if not (isinstance(factor, (int, float)) and not isinstance(factor, bool) and 0 < factor <= 1):
            raise RunnerError(BAD_INPUTS, f"scale {factor!r} must be a number in (0, 1]")
        before = _leading_dims(self)
        changed, values = [], []
        for key, frozen in self._values:
            value = frozen.thaw()
            if type(value) is int and value > 1 and value in before and not key.startswith("__"):
                new = max(1, round(value * factor))
                if new != value:
                    changed.append(f"{key} {value} -> {new}")
                    frozen = _Frozen(new)
            values.append((key, frozen))
        if not changed:
            raise RunnerError(
                BAD_INPUTS,
                f"cannot scale this task by {factor}: no module-level integer gives an input's leading dimension "
                f"(leading dimensions {sorted(before)})",
            )
        self._values = tuple(values)
        return changed

    def get_init_inputs(self) -> list:
        return _checked(self._fresh()["get_init_inputs"](), "get_init_inputs")

def _leading_dims(source) -> set:
    """The leading dimensions of the inputs, read on the meta device where the task allows it."""
    try:
        with torch.device("meta"):
            values = source.get_inputs()
    except RunnerError:
        raise
    except Exception:
        values = source.get_inputs()
    return {int(t.shape[0]) for t in tensors(values) if t.dim() >= 1}


def nbytes(values) -> int:
    """Bytes the tensors of a (nested) value hold (on the meta device, what they would hold)."""
    return sum(t.numel() * t.element_size() for t in tensors(values))


def generate(source, device: torch.device, seed: int) -> list:
    """Fresh inputs for ``seed``, on ``device``.

    On a GPU, ``get_inputs()`` runs with the device as the default, so its random tensors are
    made there: making hundreds of MB of ``randn`` on the CPU before every timed call would cost
    far more than the call. Both roles run this same code, so the same seed gives the same inputs
    in every process. A ``get_inputs()`` that cannot run that way (it calls ``.numpy()``, say)
    falls back to the CPU, once and for all.
    """
    from .seeding import seed_all

    if device.type == "cuda" and getattr(source, "_device_inputs", True):
        seed_all(seed)
        try:
            with torch.device(device):
                values = source.get_inputs()
            return to_device(values, device)
        except RunnerError:
            raise
        except Exception:
            source._device_inputs = False
    seed_all(seed)
    return to_device(source.get_inputs(), device)


def _checked(values, where: str) -> list:
    if not isinstance(values, (list, tuple)):
        raise RunnerError(BAD_INPUTS, f"{where}() returned {type(values).__name__}, not a list")
    for index, value in enumerate(values):
        _check_value(value, f"{where}()[{index}]")
    return list(values)


def _check_value(value, where: str) -> None:
    if isinstance(value, (torch.Tensor,) + _SCALARS):
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_value(item, f"{where}[{index}]")
        return
    raise RunnerError(
        BAD_INPUTS,
        f"{where} is {type(value).__name__}; expected a tensor, a number, a bool or a list of those",
    )


def spec(value) -> dict:
    """The protocol's description of one input. Lists get ``{"kind": "list", "items": [...]}``."""
    if isinstance(value, torch.Tensor):
        return {"kind": "tensor", "shape": list(value.shape), "dtype": dtype_name(value.dtype)}
    if isinstance(value, bool):
        return {"kind": "bool", "value": value}
    if isinstance(value, int):
        return {"kind": "int", "value": value}
    if isinstance(value, float):
        return {"kind": "float", "value": value}
    return {"kind": "list", "items": [spec(v) for v in value]}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def to_device(values, device: torch.device):
    if isinstance(values, torch.Tensor):
        return values.to(device)
    if isinstance(values, tuple):
        return tuple(to_device(v, device) for v in values)
    if isinstance(values, list):
        return [to_device(v, device) for v in values]
    return values


def tensors(values):
    """Every tensor in a (nested) input list, depth first."""
    if isinstance(values, torch.Tensor):
        yield values
    elif isinstance(values, (list, tuple)):
        for v in values:
            yield from tensors(v)


def snapshot(values):
    """Clones of the inputs (structure included) to detect mutation by the model."""
    if isinstance(values, torch.Tensor):
        return values.clone()
    if isinstance(values, tuple):
        return tuple(snapshot(v) for v in values)
    if isinstance(values, list):
        return [snapshot(v) for v in values]
    return values


def digest(values) -> str:
    """SHA-256 of the inputs' dtypes, shapes and contents: equal in both roles for one seed."""
    h = hashlib.sha256()
    _feed(h, values)
    return h.hexdigest()


def _feed(h, value) -> None:
    if isinstance(value, torch.Tensor):
        h.update(f"T{dtype_name(value.dtype)}{list(value.shape)}".encode())
        try:
            t = value.detach().resolve_conj().resolve_neg().contiguous()
            if t.numel():
                h.update(_content_key(t.reshape(-1).view(torch.uint8)))
        except Exception:  # exotic layouts (sparse, quantized): shape and dtype must do
            h.update(b"?")
    elif isinstance(value, (list, tuple)):
        h.update(f"L{len(value)}[".encode())
        for v in value:
            _feed(h, v)
        h.update(b"]")
    else:
        h.update(f"S{type(value).__name__}:{value!r};".encode())


_WORDS_PER_CHUNK = 1 << 24  # int32 words per pass: 128 MiB of int64 temporaries


def _content_key(data: torch.Tensor) -> bytes:
    """Bytes that identify `data` (a flat uint8 tensor) in both roles.

    On the CPU, the bytes themselves (hashed by the caller). On a GPU, two position-weighted
    64-bit sums of its 32-bit words, computed there: copying a ~1 GB input to the host and
    hashing it took seconds per checked call. Integer sums wrap modulo 2^64 in any order, so the
    key is deterministic; it detects different inputs, which is its whole job (a candidate that
    wants to lie about its inputs can lie about any digest).
    """
    if data.device.type == "cpu":
        return memoryview(data.numpy())
    return device_key(data)


def device_key(data: torch.Tensor) -> bytes:
    """The GPU side of ``_content_key``; it runs on any device."""
    length, sums = device_sums(data)
    plain, weighted = sums.tolist()
    return key_text(length, plain, weighted)


def key_text(length: int, plain: int, weighted: int) -> bytes:
    return f"{length}:{plain}:{weighted}".encode()


def device_sums(data: torch.Tensor):
    """``device_key``'s length and its two sums, still on the device (no synchronisation)."""
    length = data.numel()
    pad = (-length) % 4
    if pad:
        data = torch.cat([data, data.new_zeros(pad)])
    words = data.view(torch.int32)
    plain = torch.zeros((), dtype=torch.int64, device=data.device)
    weighted = torch.zeros((), dtype=torch.int64, device=data.device)
    for start in range(0, words.numel(), _WORDS_PER_CHUNK):
        w = words[start:start + _WORDS_PER_CHUNK].to(torch.int64)
        position = torch.arange(start, start + w.numel(), dtype=torch.int64, device=data.device)
        plain += w.sum()
        weighted += (w * (position * 2654435761 + 97)).sum()
    return length, torch.stack([plain, weighted])


class Feeder:
    """Each call's inputs, alternately in the previous call's tensors and in new ones.

    Every other call gets its new values copied into the tensors of the call before (the same
    Python objects at the same addresses): a result cached on ``data_ptr``, ``id`` or shape is
    then stale and shows as a wrong result. The calls in between get new tensors made while the
    previous ones are still alive, so their addresses differ: a CUDA graph that replays the
    addresses it captured reads stale data. Inputs above ``hold_bytes`` are not kept between
    calls (memory), which leaves their addresses to the allocator.
    """

    def __init__(self, source, device: torch.device, hold_bytes: int = 8 << 30) -> None:
        self._source = source
        self._device = device
        self._hold = hold_bytes
        self._previous = None
        self._count = 0

    def next(self, seed: int) -> list:
        fresh = generate(self._source, self._device, seed)
        previous, self._previous = self._previous, None
        reuse = self._count % 2 == 1 and previous is not None
        self._count += 1
        args = fresh
        if reuse:
            merged = _copy_into(previous, fresh)
            if merged is not None:
                args = merged
        del previous, fresh
        if _nbytes(args) <= self._hold:
            self._previous = args
        return args

    def forget(self) -> None:
        self._previous = None


def _same_layout(old, new) -> bool:
    return (
        type(old) is torch.Tensor
        and type(new) is torch.Tensor
        and old.shape == new.shape
        and old.dtype == new.dtype
        and old.device == new.device
        and old.stride() == new.stride()
        and old.layout == torch.strided
    )


def _copy_into(old, new):
    """``new``'s structure with its tensors' values copied into ``old``'s tensors, or None."""
    if isinstance(new, torch.Tensor):
        if not _same_layout(old, new):
            return None
        try:
            old.copy_(new)
        except Exception:  # overlapping memory (an expanded input) cannot be written
            return None
        return old
    if isinstance(new, (list, tuple)):
        if not isinstance(old, (list, tuple)) or len(old) != len(new):
            return None
        items = []
        for o, n in zip(old, new):
            merged = _copy_into(o, n)
            if merged is None:
                return None
            items.append(merged)
        return type(new)(items) if isinstance(new, tuple) else items
    return new


def _nbytes(values) -> int:
    return sum(t.numel() * t.element_size() for t in tensors(values))
