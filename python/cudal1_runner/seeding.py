"""Seed every generator a task might draw from, so that a seed fixes the inputs.

Seeding runs between a candidate's calls, after its code has run and before the clock starts, so
it must reach no code the candidate can replace. ``torch.manual_seed``, ``random.seed`` and
``numpy.random.seed`` are looked up by name and are Python code that looks up more names (the
backends' ``manual_seed`` functions, ``torch.random.default_generator``, ``operator.index`` in
numpy's module): a candidate that replaced any of them saw every call's input seed before the
call. Everything seeding calls is bound when this module is imported, before any task or
candidate code runs: the generators' own C methods (PyTorch's CPU generator, and the CUDA ones
once CUDA is set up, ``bind_cuda``), ``_random.Random.seed`` on ``random``'s shared instance,
and numpy's legacy ``RandomState.seed`` on its global instance. numpy's seeding is Cython that
still looks up three module globals (``mtrand._MT19937``, ``_mt19937.operator``,
``operator.index``, found by ``tests/test_input_path.py``): they, and its bit generator, are
checked before each use; where one was replaced numpy is not seeded and ``tampered()`` says so.

The functions here take no global or attribute lookups at call time (their state lives in
closures, made by ``_make``): ``tests/test_input_path.py`` checks their bytecode.
"""

import _random
import operator
import random

import torch

try:  # numpy is optional; tasks that use it need it seeded too
    import numpy as _np
    import numpy.random._mt19937 as _np_mt19937_module
    import numpy.random.mtrand as _np_mtrand_module
except Exception:  # pragma: no cover - depends on the environment
    _np = None

def mix(seed: int, index: int) -> int:
    """A seed in [0, 2^63) derived from ``seed`` and ``index`` (splitmix64)."""
    # The mask written out: a global would be a lookup at call time.
    z = (seed + (index + 1) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) >> 1


def _numpy_parts():
    """numpy's global RandomState, bound, with what its ``seed`` looks up on the way."""
    if _np is None:
        return None
    try:
        state = _np_mtrand_module._rand
        bit_generator = state._bit_generator
        watched = (
            (vars(_np_mtrand_module), "_MT19937"),
            (vars(_np_mt19937_module), "operator"),
            (vars(operator), "index"),
        )
        return (
            state,
            bit_generator,
            type(state).seed,
            vars(type(state))["_bit_generator"].__get__,
            tuple((namespace, name, namespace[name]) for namespace, name in watched),
        )
    except Exception:  # pragma: no cover - another numpy
        return None


def _make():
    """``seed_all``, ``reseed_for_call``, ``bind_cuda`` and ``tampered`` over bound parts."""
    cpu_seed = torch.default_generator.manual_seed
    cuda_seeds = []
    random_seed = _random.Random.seed
    random_instance = random._inst
    random_state = vars(random_instance)
    gauss_key = "gauss_next"
    numpy_parts = _numpy_parts()
    problems = []
    # Built-ins used at call time, as closure cells: no lookup in a module or ``builtins``.
    _type, _str, _len, _iter, _next = type, str, len, iter, next
    _list_append = list.append
    _mix = mix
    modulo = 2**32

    def numpy_untouched():
        state, bit_generator, seed, bit_generator_of, watched = numpy_parts
        if bit_generator_of(state, None) is not bit_generator:
            return "numpy's global RandomState has another bit generator"
        for namespace, name, value in watched:
            for key in namespace:
                if _type(key) is not _str:
                    return "a module numpy's seeding reads has a key that is not a string"
            if namespace.get(name) is not value:
                return "numpy's seeding would call a replaced " + name
        return None

    def seed_all(seed):
        """Seeds PyTorch's CPU generator (and CUDA's, once bound), ``random`` and numpy."""
        cpu_seed(seed)
        for cuda_seed in cuda_seeds:
            cuda_seed(seed)
        # ``random.seed`` also forgets a cached normal deviate; its instance dict is written
        # directly (no attribute lookup through a class the candidate may have changed).
        if _len(random_state) != 1 or _next(_iter(random_state)) is not gauss_key:
            random_state.clear()
        random_state[gauss_key] = None
        random_seed(random_instance, seed)
        if numpy_parts is not None:
            why = numpy_untouched()
            if why is None:
                numpy_parts[2](numpy_parts[0], seed % modulo)
            elif not problems:
                _list_append(problems, why)

    def reseed_for_call(seed):
        """Before a model call: the generators are seeded from the call's own input seed, which
        the Rust side draws from fresh randomness for every call (docs/protocol.md), so what they
        reveal says nothing about any other call's inputs.

        A model that draws random numbers in ``forward`` gets the same numbers in both roles.
        """
        seed_all(_mix(seed, 0x5EED))

    def bind_cuda(generators):
        """Seed these CUDA generators too (``torch.cuda.default_generators``, once CUDA is set
        up; called before any candidate code runs)."""
        del cuda_seeds[:]
        for generator in generators:
            _list_append(cuda_seeds, generator.manual_seed)

    def tampered():
        """What kept seeding from using what it bound (once), then nothing."""
        found = list(problems)
        del problems[:]
        return found

    return seed_all, reseed_for_call, bind_cuda, tampered


seed_all, reseed_for_call, bind_cuda, tampered = _make()
