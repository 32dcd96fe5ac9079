"""The input path (``inputs.make_path``, ``seeding``) reaches no code a candidate can replace.

Between a candidate's calls, before the clock starts, the runner seeds the generators, makes the
next call's inputs and copies them into place. Code of the candidate's that runs there after the
seed is set can compute the next output outside the timed window. These tests build the path as
the runner does (before any "candidate" code), then replace or hook everything the old path
looked up (``random.seed``, numpy's seed, ``torch.manual_seed`` and what it calls,
``types.FunctionType``, ``torch.randn``, ``copy_`` on an input tensor, finalizers, the
collector's callbacks) and check that none of it runs and the inputs are the same.
"""

import dis
import gc
import operator
import random
import sys
import types
import weakref

import numpy as np
import numpy.random._mt19937 as np_mt19937
import numpy.random.mtrand as np_mtrand
import pytest
import torch

from cudal1_runner import inputs, seeding
from cudal1_runner.inputs import InputSource, make_path

# Attribute names the path's code may look up: methods of built-in containers and strings (whose
# types a candidate cannot change), and a type's name in error messages.
_ATTRS = {"get", "items", "values", "clear", "join", "__name__"}
_OWN_FILES = {inputs.__file__, seeding.__file__}


def _reference_module():
    module = types.ModuleType("_cudal1_reference_input_path_test")
    exec(
        "import random\nimport numpy as np\nimport torch\n"
        "N = 6\n"
        "def get_inputs():\n"
        "    a = torch.randn(N, 4)\n"
        "    return [a, torch.rand(3) + random.random() + float(np.random.rand()), [torch.randint(0, 9, (2,)), 3]]\n"
        "def get_init_inputs():\n"
        "    return []\n",
        vars(module),
    )
    return module


def _flat(values):
    out = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out += _flat(v)
        else:
            out.append(v.clone() if isinstance(v, torch.Tensor) else v)
    return out


def _same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b))


def _functions_reached(*roots):
    """The Python functions of the path: the roots and, through their closures, every function
    of the runner's input modules they hold."""
    seen, stack = {}, list(roots)
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen[id(fn)] = fn
        for cell in fn.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if isinstance(value, types.FunctionType) and value.__code__.co_filename in _OWN_FILES:
                stack.append(value)
    return list(seen.values())


def _codes(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def test_the_path_looks_nothing_up_in_a_module_or_on_an_object_a_candidate_can_change():
    path = make_path(InputSource(_reference_module()), torch.device("cpu"))
    reached = _functions_reached(path.next_inputs, seeding.seed_all, seeding.reseed_for_call)
    names = {fn.__name__ for fn in reached}
    assert {"next_inputs", "prepare", "thaw", "draw", "check", "copy_into", "same_layout", "seed_all", "numpy_untouched"} <= names, names
    bad = []
    for fn in reached:
        for code in _codes(fn.__code__):
            for ins in dis.get_instructions(code):
                if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "IMPORT_NAME"):
                    bad.append(f"{code.co_name}: {ins.opname} {ins.argval}")
                elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR") and ins.argval not in _ATTRS | {"__kwdefaults__"}:
                    bad.append(f"{code.co_name}: {ins.opname} {ins.argval}")
    assert bad == []


class _Hooks:
    """Replacements of what the old input path looked up, each counting its calls made while
    the path runs."""

    def __init__(self):
        self.calls = []
        self.inside = False
        self._undo = []

    def note(self, what):
        if self.inside:
            self.calls.append(what)

    def replace(self, owner, name, make):
        original = getattr(owner, name)
        setattr(owner, name, make(original))
        self._undo.append((owner, name, original))

    def seen(self, what):
        def hook(original):
            def replacement(*args, **kwargs):
                self.note(what)
                return original(*args, **kwargs)

            return replacement

        return hook

    def undo(self):
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)


def test_nothing_a_candidate_replaced_or_hooked_runs_and_the_inputs_stay_the_same():
    source = InputSource(_reference_module())
    path = make_path(source, torch.device("cpu"))
    seeds = [11, 2**40 + 3, 12, 2**62 + 5, 13]
    before = [_flat(path.next_inputs(s)) for s in seeds]
    path.forget()

    hooks = _Hooks()
    collecting, threshold = gc.isenabled(), gc.get_threshold()
    finalized = []

    def on_collect(phase, info):
        hooks.note("gc callback")  # the path turns the collector off first

    try:
        hooks.replace(random, "seed", hooks.seen("random.seed"))
        hooks.replace(np.random, "seed", hooks.seen("numpy.random.seed"))
        hooks.replace(torch, "manual_seed", hooks.seen("torch.manual_seed"))
        hooks.replace(torch.random, "manual_seed", hooks.seen("torch.random.manual_seed"))
        hooks.replace(torch.mps, "manual_seed", hooks.seen("torch.mps.manual_seed"))
        hooks.replace(torch.cuda, "manual_seed_all", hooks.seen("torch.cuda.manual_seed_all"))
        hooks.replace(torch, "randn", hooks.seen("torch.randn"))
        hooks.replace(torch, "rand", hooks.seen("torch.rand"))
        hooks.replace(types, "FunctionType", hooks.seen("types.FunctionType"))
        hooks.replace(inputs, "_FunctionType", hooks.seen("inputs._FunctionType"))
        hooks.replace(inputs, "_checked", hooks.seen("inputs._checked"))
        hooks.replace(inputs, "_pickle_loads", hooks.seen("inputs._pickle_loads"))
        hooks.replace(seeding, "seed_all", hooks.seen("seeding.seed_all"))

        class Stand(object):
            def __init__(self, real):
                self.real = real

            def manual_seed(self, seed):
                hooks.note("default_generator.manual_seed")
                return self.real.manual_seed(seed)

        hooks.replace(torch.random, "default_generator", Stand)
        gc.callbacks.append(on_collect)
        gc.enable()
        gc.set_threshold(1)
        after = []
        for s in seeds:
            hooks.inside = True
            args = path.next_inputs(s)
            hooks.inside = False
            gc.enable()  # as a candidate's call may
            first = args[0]
            # What a call may do to the tensors it was given: a `copy_` of its own, a finalizer.
            first.copy_ = lambda src, non_blocking=False: hooks.note("copy_ on the instance")
            weakref.finalize(first, finalized.append, s)
            after.append(_flat(args))
            del args, first
    finally:
        hooks.undo()
        gc.callbacks.remove(on_collect)
        gc.set_threshold(*threshold)
        (gc.enable if collecting else gc.disable)()
    assert hooks.calls == []
    assert all(_same(a, b) for a, b in zip(before, after))
    # Every other call reuses the previous call's tensors; the others let them go before seeding.
    assert finalized and all(f in seeds for f in finalized)
    assert path.findings() == []


def test_a_finalizer_of_the_previous_inputs_runs_before_the_next_seed_is_set():
    path = make_path(InputSource(_reference_module()), torch.device("cpu"))
    seen = []
    args = path.next_inputs(5)
    path.next_inputs(6)  # reuses the tensors of the call before
    weakref.finalize(args[0], lambda: seen.append(torch.initial_seed()))
    del args
    path.next_inputs(7)  # new tensors: the old ones go
    # It ran before seed 7 was set: it saw what the call before left.
    assert seen == [6]


def test_a_mode_or_a_tensor_method_in_place_when_inputs_are_made_is_reported():
    path = make_path(InputSource(_reference_module()), torch.device("cpu"))
    path.next_inputs(1)
    original = torch.Tensor.__dict__.get("add")
    torch.Tensor.add = lambda self, *a, **k: torch._C.TensorBase.add(self, *a, **k)

    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    try:
        with Mode():
            path.next_inputs(2)
    finally:
        if original is None:
            del torch.Tensor.add
        else:
            torch.Tensor.add = original
    kinds = sorted(f["kind"] for f in path.findings())
    assert kinds == ["tampered_tensor", "tampered_torch_mode"]
    # Putting it back is a change too (seen once); then nothing.
    path.next_inputs(3)
    assert [f["kind"] for f in path.findings()] == ["tampered_tensor"]
    path.next_inputs(4)
    assert path.findings() == []


def test_numpy_seeding_reads_only_what_it_checks():
    """Every global of the modules numpy's legacy seeding runs in, replaced in turn by an object
    that records its use: seeding either does not touch it or sees it replaced and leaves numpy
    unseeded (and says so)."""
    used = []

    class Spy:
        def __init__(self, name):
            self._name = name

        def __getattr__(self, attr):
            used.append(self._name)
            raise AttributeError(attr)

        def __call__(self, *args, **kwargs):
            used.append(self._name)

        def __instancecheck__(self, obj):
            used.append(self._name)
            return True

    seeding.tampered()
    refused = []
    for module in (np_mtrand, np_mt19937, operator, np.random, np):
        namespace = vars(module)
        for name in [n for n in namespace if not n.startswith("__")]:
            original = namespace[name]
            namespace[name] = Spy(f"{module.__name__}.{name}")
            try:
                seeding.seed_all(1234)
            finally:
                namespace[name] = original
            refused += seeding.tampered()
    assert used == []
    assert len(refused) == 3, refused
    # Untouched again, it seeds as numpy.random.seed does.
    seeding.seed_all(99)
    ours = np.random.rand(3)
    np.random.seed(99)
    assert np.array_equal(ours, np.random.rand(3)) and seeding.tampered() == []


def test_seeding_gives_what_the_library_functions_give():
    seeding.seed_all(2**50 + 7)
    ours = (torch.rand(2), random.random(), random.gauss(0, 1), np.random.rand())
    torch.manual_seed(2**50 + 7)
    random.seed(2**50 + 7)
    np.random.seed((2**50 + 7) % 2**32)
    theirs = (torch.rand(2), random.random(), random.gauss(0, 1), np.random.rand())
    assert torch.equal(ours[0], theirs[0]) and ours[1:] == theirs[1:]


def test_module_views_keep_what_the_reference_looked_up_before_the_candidate():
    module = _reference_module()
    source = InputSource(module)
    path = make_path(source, torch.device("cpu"))
    expected = _flat(path.next_inputs(3))
    original = torch.randn
    torch.randn = lambda *a, **k: torch.zeros(*a)
    try:
        got = _flat(path.next_inputs(3))
    finally:
        torch.randn = original
    assert _same(expected, got)
    assert sys.modules.get(module.__name__) is None
