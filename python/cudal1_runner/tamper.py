"""Has anything the runner or a timer relies on been replaced since the runner started?

Before any task or candidate code runs, the runner records the identity of every attribute of
the modules and classes that timing, synchronisation, comparison and output checks go through
(``time``, ``torch``, ``torch.cuda``, ``torch.Tensor``, ``nn.Module``, ``builtins``, the runner's
own modules, the thread-start wrappers). ``check`` reports each group in which an attribute now
refers to something else, as a finding ``tampered_<group>``. The runner binds its clocks at
import, so a patched timer changes no measurement; the finding is there because trying is
itself the exploit.

PyTorch patches a few of its own functions lazily (``torch._dynamo`` wraps ``torch.manual_seed``
and ``nn.Module.__init__``); a replacement that is a Python function whose code comes from an
installed library's file (by its resolved location, ``origin``) is accepted as the new original.
The runner never patches itself or its protocol functions, so no replacement is accepted there.

The protocol's own functions are watched too (group ``protocol``: ``os.write``/``os.read``, the
``json`` modules): the runner does not use them after it starts (``wire``), but replacing them
is an attempt to rewrite replies or read requests. So are the modules the input path used to look
things up in between calls (group ``inputs``: ``random``, ``types``, ``copy``, ``pickle``,
``operator``, ``torch.random``, ``numpy.random``): it binds what it needs before any candidate
code runs (``inputs.make_path``, ``seeding``), but a candidate that replaces them is trying to see
the next call's inputs before the clock starts. Their values are watched whether callable or not
(``torch.random.default_generator`` is an object), as are the runner's own modules' (but the
names they reassign themselves).

``check`` is cheap where nothing changed (one comparison of identities per namespace, in C), so
the guard also runs it at the start of every request: what the runner looks up there (its
session's methods, the timing module) is then known to be what it was, whatever ran before.
"""

import _thread
import builtins
import copy
import dis
import gc
import json
import operator
import pickle
import random
import json.decoder
import json.encoder
import os
import sys
import threading
import time
import types

import torch
import torch.nn.functional
import torch.random

_MISSING = object()
_FunctionType = types.FunctionType  # bound: the candidate may replace ``types.FunctionType``

# Modules the input path used to look names up in between a candidate's calls.
_INPUT_MODULES = ["random", "types", "copy", "pickle", "operator", "torch.random", "numpy.random", "numpy.random.mtrand", "numpy.random._mt19937"]

# Bound when the runner starts, before any candidate code: what ``unchanged`` calls.
_all, _map, _is, _len = all, map, operator.is_, len

# Attribute names that decide the group of a torch-level entry.
_COMPARISONS = frozenset({"allclose", "isclose", "equal", "eq", "ne", "testing"})
_SYNC = frozenset({"synchronize", "current_stream", "default_stream", "Stream", "stream", "set_stream", "_cuda_synchronize", "_cuda_getCurrentStream"})


def _group_for(owner: str, name: str) -> str:
    if owner == "time":
        return "timer"
    if owner in ("torch.testing",) or (owner == "torch" and name in _COMPARISONS):
        return "allclose"
    if owner == "torch.cuda.Event" or (owner == "torch.cuda" and name == "Event"):
        return "event"
    if owner in ("torch.cuda.Stream",) or (owner in ("torch.cuda", "torch._C") and name in _SYNC):
        return "synchronize"
    if owner == "torch.Tensor":
        return "tensor"
    if owner == "torch.nn.Module":
        return "module"
    if owner in ("builtins", "gc"):
        return "builtins"
    if owner == "threads":
        return "threads"
    if owner.startswith("cudal1_runner"):
        return "runner"
    if owner in ("os", "json", "json.encoder", "json.decoder"):
        return "protocol"
    if owner in _INPUT_MODULES:
        return "inputs"
    return "torch"


# Groups in which no replacement is accepted, whatever its origin.
_NEVER_PATCHED = frozenset({"runner", "protocol"})


class Baseline:
    """Identities recorded at construction; ``check`` compares against them."""

    def __init__(self, extra=(), origins=None) -> None:
        self._origins = origins
        self._entries = []  # (owner label, namespace dict, name, recorded object)
        self._classes = []  # (label, class namespace, names at the start): an added name shadows a base's
        watched = [
            ("time", time),
            ("builtins", builtins),
            ("gc", gc),
            ("torch", torch),
            ("torch.nn.functional", torch.nn.functional),
            ("torch.testing", torch.testing),
            ("torch.Tensor", torch.Tensor),
            ("torch.nn.Module", torch.nn.Module),
        ]
        cuda = getattr(torch, "cuda", None)
        if cuda is not None:
            watched += [("torch.cuda", cuda), ("torch.cuda.Event", cuda.Event), ("torch.cuda.Stream", cuda.Stream)]
        for label, owner in watched:
            self._record_namespace(label, owner)
        for name in ("write", "read"):
            self._entries.append(("os", vars(os), name, getattr(os, name)))
        for label, module in (("json", json), ("json.encoder", json.encoder), ("json.decoder", json.decoder)):
            self._record_namespace(label, module)
        for name in ("_cuda_synchronize", "_cuda_getCurrentStream"):
            if hasattr(torch._C, name):
                self._entries.append(("torch._C", vars(torch._C), name, getattr(torch._C, name)))
        for name, module in sorted(sys.modules.items()):
            if (name == "cudal1_runner" or name.startswith("cudal1_runner.")) and module is not None:
                self._record_namespace(name, module, classes_too=True, data_too=True)
        for name in _INPUT_MODULES:
            module = sys.modules.get(name)
            if module is not None:
                self._record_namespace(name, module, data_too=True)
        for label, namespace, name in extra:
            self._entries.append((label, namespace, name, namespace.get(name, _MISSING)))
        self._index()

    def _record_namespace(self, label: str, owner, classes_too: bool = False, data_too: bool = False) -> None:
        namespace = vars(owner)
        if isinstance(owner, type):
            self._classes.append((label, namespace, frozenset(namespace)))
        reassigned = _reassigned(owner) if data_too else frozenset()
        for name, value in list(namespace.items()):
            if name.startswith("__") and name.endswith("__") and not isinstance(owner, type):
                continue  # module dunders (__spec__, __loader__) are the import system's
            if isinstance(owner, types.ModuleType) and not callable(value) and (not data_too or name in reassigned):
                continue  # plain data (flags, version strings) may change legitimately
            self._entries.append((label, namespace, name, value))
            if classes_too and isinstance(value, type) and getattr(value, "__module__", "") == getattr(owner, "__name__", None):
                self._record_namespace(f"{label}.{name}", value)

    def _library_function(self, value) -> bool:
        """A Python function whose code comes from an installed library's file."""
        if type(value) is not _FunctionType or self._origins is None:
            return False
        return self._origins.kind(value.__code__.co_filename) == "library"

    def _index(self) -> None:
        """Per namespace: its recorded names, a C getter of their values and the recorded objects."""
        by_namespace = {}
        for label, namespace, name, recorded in self._entries:
            if recorded is _MISSING:
                continue
            names, objects = by_namespace.setdefault(id(namespace), (namespace, [], []))[1:]
            names.append(name)
            objects.append(recorded)
        self._fast = [
            (namespace, operator.itemgetter(*names, *names[:1]), tuple(objects + objects[:1]))
            for namespace, names, objects in by_namespace.values()
        ]
        self._class_sizes = [(namespace, len(names)) for _, namespace, names in self._classes]

    def unchanged(self) -> bool:
        """Nothing recorded was replaced or deleted, and no class gained a name (a quick test:
        one pass of identity comparisons per namespace). Identities are compared with
        ``operator.is_``, never through ``id()``: ``id()`` raises an audit event, and in the
        candidate's process, where the runner's audit hook runs for every event, thousands of
        them cost milliseconds per block that the reference does not spend (an H100: honest
        candidates judged `untimed_work`)."""
        try:
            for namespace, values, objects in self._fast:
                if not _all(_map(_is, values(namespace), objects)):
                    return False
        except KeyError:
            return False
        for namespace, size in self._class_sizes:
            if _len(namespace) != size:
                return False
        return True

    def check(self) -> list:
        """One finding per group with a replaced, added-over or deleted attribute."""
        if self.unchanged():
            return []
        found = self._check()
        # Replacements accepted as PyTorch's own (and names seen) are the baseline from now on.
        self._index()
        return found

    def _check(self) -> list:
        changed = {}
        for index, (label, namespace, name, recorded) in enumerate(self._entries):
            now = namespace.get(name, _MISSING)
            if now is recorded:
                continue
            group = _group_for(label, name)
            if group not in _NEVER_PATCHED and self._library_function(now):
                # Accept and remember: PyTorch's own lazy wrappers.
                self._entries[index] = (label, namespace, name, now)
                continue
            changed.setdefault(_group_for(label, name), []).append(f"{label}.{name}")
        for index, (label, namespace, names) in enumerate(self._classes):
            if len(namespace) != len(names) or not names.issuperset(namespace):
                added = [name for name in set(namespace) - names if not _plain_data(namespace[name])]
                for name in added:
                    changed.setdefault(_group_for(label, name), []).append(f"{label}.{name}")
                if not added and names.issubset(namespace):
                    # Only marker attributes (torch._dynamo adds one to nn.Module): accepted.
                    self._classes[index] = (label, namespace, frozenset(namespace))
        return [
            {"kind": f"tampered_{group}", "detail": f"replaced since the runner started: {', '.join(sorted(names)[:8])}"}
            for group, names in sorted(changed.items())
        ]


def _reassigned(module) -> frozenset:
    """Names a module's own code assigns with ``global`` (its state, not something to watch)."""
    names = set()
    stack = [value.__code__ for value in vars(module).values() if isinstance(value, types.FunctionType)]
    stack += [f.__code__ for value in vars(module).values() if isinstance(value, type) for f in vars(value).values() if isinstance(f, types.FunctionType)]
    while stack:
        code = stack.pop()
        names.update(i.argval for i in dis.get_instructions(code) if i.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"))
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return frozenset(names)


def _plain_data(value) -> bool:
    kind = type(value)
    return not callable(value) and not any(hasattr(kind, m) for m in ("__get__", "__set__", "__delete__"))


def thread_entries() -> list:
    """Extra entries for the thread-start wrappers installed by ``threads``."""
    entries = []
    for name in ("start_new_thread", "start_new", "start_joinable_thread"):
        if hasattr(_thread, name):
            entries.append(("threads", vars(_thread), name))
    for name in ("_start_new_thread", "_start_joinable_thread"):
        if hasattr(threading, name):
            entries.append(("threads", vars(threading), name))
    return entries
