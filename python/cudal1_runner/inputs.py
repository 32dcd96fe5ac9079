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
import gc
import hashlib
import operator
import pickle
import types

import torch

from . import seeding
from .errors import BAD_INPUTS, RunnerError

_SCALARS = (bool, int, float)

# Bound when the runner starts, before any task or candidate code runs (see ``make_path``).
_FunctionType = types.FunctionType
_ModuleType = types.ModuleType
_pickle_loads = pickle.loads
_deepcopy = copy.deepcopy
_Tensor = torch.Tensor
_TensorBase = torch._C.TensorBase


def _module_view(module, views: dict):
    """A module object holding a copy of ``module``'s namespace as it is now, with the
    submodules of its package as views too: names the reference's code looks up on it
    (``torch.randn``, ``F.relu``) resolve to what they were before any candidate code ran."""
    key = id(module)
    if key in views:
        return views[key]
    view = _ModuleType(module.__name__)
    views[key] = view
    root = module.__name__.partition(".")[0] + "."
    namespace = dict(vars(module))
    for name, value in namespace.items():
        # ``type``, not ``isinstance``: some of torch's deprecated objects warn when their
        # ``__class__`` is read.
        if issubclass(type(value), _ModuleType) and (value.__name__ + ".").startswith(root):
            namespace[name] = _module_view(value, views)
    vars(view).update(namespace)
    return view


class _SavedFunction:
    """What is needed to rebuild a module-level function over other globals."""

    __slots__ = ("_parts",)

    def __init__(self, fn: types.FunctionType) -> None:
        # A tuple, so the saved code cannot be swapped by assignment.
        self._parts = (fn.__code__, fn.__name__, _Frozen(fn.__defaults__), _Frozen(fn.__kwdefaults__), fn.__closure__)

    def rebuild(self, globals_: dict) -> types.FunctionType:
        code, name, defaults, kwdefaults, closure = self._parts
        fn = _FunctionType(code, globals_, name, defaults.thaw(), closure)
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
            return _pickle_loads(payload)
        if how == "copied":
            return _copy_value(payload)
        return payload


def _copy_value(value):
    # Modules, classes and functions deep-copy to themselves; anything that refuses is shared.
    try:
        return _deepcopy(value)
    except Exception:
        return value


class InputSource:
    """The reference's ``get_inputs``/``get_init_inputs`` over a snapshot of its globals.

    Modules among the globals are replaced by views of their namespaces taken now (before any
    candidate code runs), so the reference's own lookups (``torch.randn``) cannot reach a
    function the candidate put in a module later.
    """

    def __init__(self, module) -> None:
        namespace = vars(module)
        values, functions = [], []
        views = {}
        for key, value in namespace.items():
            if isinstance(value, types.FunctionType) and value.__globals__ is namespace:
                functions.append((key, _SavedFunction(value)))
            elif issubclass(type(value), _ModuleType) and not (key.startswith("__") and key.endswith("__")):
                values.append((key, _Frozen(_module_view(value, views), shared=True)))
            else:
                # Module attributes such as __builtins__ and __spec__ are the interpreter's, not data.
                dunder = key.startswith("__") and key.endswith("__")
                values.append((key, _Frozen(value, shared=dunder)))
        # Tuples rather than dicts: there is no mapping of the globals left to edit.
        self._values = tuple(values)
        self._functions = tuple(functions)
        self.prepare = _make_prepare(self._values, self._functions)

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
        self.prepare = _make_prepare(self._values, self._functions)
        return changed

    def get_init_inputs(self) -> list:
        return _checked(self._fresh()["get_init_inputs"](), "get_init_inputs")


def _make_prepare(values: tuple, functions: tuple):
    """``prepare()``: a fresh ``get_inputs`` over fresh copies of the saved globals, made by a
    closure over what it needs (no global or attribute lookup at call time). Run before a call's
    seed is set: what it runs (unpickling, a deep copy) learns nothing of the coming inputs."""
    loads, deepcopy, Function, Error = _pickle_loads, _deepcopy, _FunctionType, Exception
    saved_values = tuple((key,) + frozen._parts for key, frozen in values)
    saved_functions = tuple(
        (key, code, name) + defaults._parts + kwdefaults._parts + (closure,)
        for key, saved in functions
        for code, name, defaults, kwdefaults, closure in (saved._parts,)
    )

    def thaw(how, payload):
        if how == "pickled":
            return loads(payload)
        if how == "copied":
            # Modules, classes and functions deep-copy to themselves; what refuses is shared.
            try:
                return deepcopy(payload)
            except Error:
                return payload
        return payload

    def prepare():
        globals_ = {}
        for key, how, payload in saved_values:
            globals_[key] = thaw(how, payload)
        for key, code, name, d_how, d_payload, k_how, k_payload, closure in saved_functions:
            fn = Function(code, globals_, name, thaw(d_how, d_payload), closure)
            fn.__kwdefaults__ = thaw(k_how, k_payload)
            globals_[key] = fn
        return globals_.get("get_inputs")

    return prepare


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
    """Fresh inputs for ``seed``, on ``device`` (one call of a new ``make_path``)."""
    collecting = gc.isenabled()
    try:
        return make_path(source, device, hold_bytes=0, watch=False).next_inputs(seed)
    finally:
        if collecting:
            gc.enable()


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


def make_path(source, device: torch.device, hold_bytes: int = 8 << 30, watch: bool = True):
    """The input path: ``next_inputs(seed)`` makes a call's inputs, ``forget()`` drops the kept
    ones, ``findings()`` says what it saw changed. Made when a task loads, before any candidate
    code is imported.

    Between a candidate's calls, before the clock starts, nothing the candidate wrote may run:
    code that runs there after the seed is set can compute the next output outside the timed
    window (a replaced ``random.seed``, ``types.FunctionType``, ``copy_`` set on an input
    tensor, a finalizer on an input let go, a garbage-collector callback). So ``next_inputs``

    - is a closure over what it uses, bound here (``TensorBase``'s C methods and descriptors,
      the seeding functions, built-ins): it looks nothing up in a module, a class or an object
      the candidate can reach (``tests/test_input_path.py`` checks its bytecode);
    - lets go of everything the candidate saw (the previous call's tensors, unless they are
      reused) and makes the fresh globals of ``get_inputs`` before it sets the seed; what it
      makes after that is kept until the next call's start;
    - turns the garbage collector off (the caller turns it back on after the call) and checks
      that no torch function or dispatch mode is active and that ``torch.Tensor``'s methods
      (which ``get_inputs`` looks up on its tensors) are the ones it started with;
    - runs the reference's ``get_inputs`` over views of its modules taken before any candidate
      code ran (``InputSource``).

    Every other call gets its new values copied into the tensors of the call before (the same
    Python objects at the same addresses): a result cached on ``data_ptr``, ``id`` or shape is
    then stale and shows as a wrong result. The calls in between get new tensors made while the
    previous ones are still alive, so their addresses differ: a CUDA graph that replays the
    addresses it captured reads stale data. Inputs above ``hold_bytes`` are not kept between
    calls (memory), which leaves their addresses to the allocator.

    On a GPU, ``get_inputs()`` runs with the device as the default, so its random tensors are
    made there: making hundreds of MB of ``randn`` on the CPU before every timed call would cost
    far more than the call. Both roles run this same code, so the same seed gives the same inputs
    in every process. A ``get_inputs()`` that cannot run that way (it calls ``.numpy()``, say)
    falls back to the CPU, once and for all.
    """
    prepare = source.prepare
    seed_all = seeding.seed_all
    gpu = device.type == "cuda"
    on_device = [gpu]
    device_default = torch.device(device)
    # Built-ins and torch's C methods, as closure cells.
    _type, _len, _isinstance, _zip, _range, _list, _tuple = type, len, isinstance, zip, range, list, tuple
    _list_append, _dict_values = list.append, dict.values
    _map, _enumerate, _str = map, enumerate, str
    Tensor, Error, Interrupt = _Tensor, Exception, KeyboardInterrupt
    scalars = _SCALARS
    strided = torch.strided
    copy_ = _TensorBase.copy_
    to = _TensorBase.to
    stride = _TensorBase.stride
    numel = _TensorBase.numel
    element_size = _TensorBase.element_size
    base = vars(_TensorBase)
    shape_of, dtype_of = base["shape"].__get__, base["dtype"].__get__
    device_of, layout_of = base["device"].__get__, base["layout"].__get__
    gc_disable = gc.disable
    function_modes = getattr(torch._C, "_len_torch_function_stack", lambda: 0)
    dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)
    modes_at_start = (function_modes(), dispatch_modes())
    # Classes and modules whose attributes the path's own torch calls and ``get_inputs`` look up
    # at call time: torch.Tensor's methods; on a GPU, the device context that makes tensors there.
    watched = [("torch.Tensor", vars(_Tensor))]
    if gpu:
        import torch.utils._device as device_module

        watched += [("torch.utils._device", vars(device_module)), ("DeviceContext", vars(device_module.DeviceContext))]
    # Identities compared with ``operator.is_``, not ``id()``, which raises an audit event: in the
    # candidate's process the runner's audit hook would run for each, an untimed cost the
    # reference does not have.
    _is, _all = operator.is_, all
    watched = tuple((label, namespace, [_tuple(namespace.values())], [dict(namespace)]) for label, namespace in watched)
    Refused, bad_inputs = RunnerError, BAD_INPUTS
    plain = (type(None), bool, int, float, str, bytes, tuple, list, frozenset)
    _dict = dict
    found = []
    state = {"previous": None, "kept": None, "count": 0}

    def check():
        modes = (function_modes(), dispatch_modes())
        if modes[0] > modes_at_start[0] or modes[1] > modes_at_start[1]:
            _list_append(found, ("tampered_torch_mode", "a torch function or dispatch mode was active while the runner made a call's inputs, where it sees them before the call"))
        for label, namespace, ids, before in watched:
            now = _tuple(namespace.values())
            if _len(now) != _len(ids[0]) or not _all(_map(_is, now, ids[0])):
                old = before[0]
                # Data added by the standard library (``copyreg`` caches ``__slotnames__`` on a
                # class whose instances it copied) calls nothing; anything else is a change.
                names = [
                    k for k, v in namespace.items()
                    if old.get(k, found) is not v and not (k not in old and _type(v) in plain)
                ] + [k for k in old if k not in namespace]
                if names:
                    kind = "tampered_tensor" if label == "torch.Tensor" else "tampered_inputs"
                    _list_append(found, (kind, label + " changed while the runner made a call's inputs (" + ", ".join(names[:8]) + "), where its code sees them before the call"))
                ids[0], before[0] = now, _dict(namespace)

    def structure(values, where):
        if _isinstance(values, Tensor) or _isinstance(values, scalars):
            return
        if _isinstance(values, (_list, _tuple)):
            for index, item in _enumerate(values):
                structure(item, where + "[" + _str(index) + "]")
            return
        raise Refused(bad_inputs, where + " is " + _type(values).__name__ + "; expected a tensor, a number, a bool or a list of those")

    def checked(values):
        if not _isinstance(values, (_list, _tuple)):
            raise Refused(bad_inputs, "get_inputs() returned " + _type(values).__name__ + ", not a list")
        for index, value in _enumerate(values):
            structure(value, "get_inputs()[" + _str(index) + "]")
        return _list(values)

    def same_layout(old, new):
        return (
            _type(old) is Tensor
            and _type(new) is Tensor
            and shape_of(old, None) == shape_of(new, None)
            and dtype_of(old, None) is dtype_of(new, None)
            and device_of(old, None) == device_of(new, None)
            and stride(old) == stride(new)
            and layout_of(old, None) is strided
        )

    def copy_into(old, new):
        """``new``'s structure with its tensors' values copied into ``old``'s tensors, or None."""
        if _isinstance(new, Tensor):
            if not same_layout(old, new):
                return None
            try:
                copy_(old, new)
            except Error:  # overlapping memory (an expanded input) cannot be written
                return None
            return old
        if _isinstance(new, (_list, _tuple)):
            if not _isinstance(old, (_list, _tuple)) or _len(old) != _len(new):
                return None
            items = []
            for o, n in _zip(old, new):
                merged = copy_into(o, n)
                if merged is None:
                    return None
                _list_append(items, merged)
            return _tuple(items) if _isinstance(new, _tuple) else items
        return new

    def moved(values):
        if _isinstance(values, Tensor):
            return to(values, device)
        if _isinstance(values, _tuple):
            return _tuple([moved(v) for v in values])
        if _isinstance(values, _list):
            return [moved(v) for v in values]
        return values

    def size(values):
        if _isinstance(values, Tensor):
            return numel(values) * element_size(values)
        if _isinstance(values, (_list, _tuple)):
            total = 0
            for v in values:
                total += size(v)
            return total
        return 0

    def draw(get_inputs, seed):
        seed_all(seed)
        if on_device[0]:
            try:
                with device_default:
                    return moved(checked(get_inputs()))
            except Interrupt:
                raise
            except Error as exc:
                if _type(exc) is Refused:
                    raise
                on_device[0] = False
                seed_all(seed)
        return moved(checked(get_inputs()))

    def next_inputs(seed):
        gc_disable()
        reuse = state["count"] % 2 == 1 and state["previous"] is not None
        state["count"] += 1
        # Everything the candidate saw, and all this path made for the last call, goes now:
        # finalizers of the candidate's run before any seed is set.
        state["kept"] = None
        if not reuse:
            state["previous"] = None
        get_inputs = prepare()
        if watch:
            check()
        fresh = draw(get_inputs, seed)
        args = fresh
        if reuse:
            merged = copy_into(state["previous"], fresh)
            if merged is not None:
                args = merged
            else:
                state["kept"] = state["previous"]
        state["previous"] = args if size(args) <= hold_bytes else None
        return args

    def forget():
        state["previous"] = None
        state["kept"] = None

    def findings():
        out = [{"kind": kind, "detail": detail} for kind, detail in found]
        for why in seeding.tampered():
            out.append({"kind": "tampered_inputs", "detail": why})
        del found[:]
        return out

    return _Path(next_inputs, forget, findings)


class _Path:
    """The three functions of ``make_path``, read once by their users."""

    __slots__ = ("next_inputs", "forget", "findings")

    def __init__(self, next_inputs, forget, findings) -> None:
        self.next_inputs, self.forget, self.findings = next_inputs, forget, findings
