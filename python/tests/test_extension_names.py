"""How a build is named and found, in-process (no compiler): the compile pool runs as pid 2 of a
PID namespace, the candidate's process too, and the profiling driver outside any with a large
pid. All of them must find one build under one fingerprint."""

import inspect
import os

import pytest

from cudal1_runner import extensions


def bound(**kwargs):
    import torch.utils.cpp_extension as cpp

    signature = inspect.signature(getattr(cpp.load_inline, "__wrapped__", cpp.load_inline))
    args = {"cpp_sources": ["int f() { return 1; }"], "functions": ["f"], "verbose": False}
    args.update(kwargs)
    return signature.bind(**args)


def named(name, pid, monkeypatch):
    """The name a process of ``pid`` builds under, and the fingerprint it looks the build up by."""
    monkeypatch.setattr(os, "getpid", lambda: pid)
    b = bound(name=name)
    extensions._stable_name(b)
    return b.arguments["name"], extensions._fingerprint(b, name)


def test_a_small_pid_is_never_taken_for_a_number_of_the_name(monkeypatch):
    # In a PID namespace the pool is pid 2: the 2 of "l2" is not its id.
    assert named("cudal1_l2_1_gelu", 2, monkeypatch)[0] == "cudal1_l2_1_gelu"
    # Outside one, a process's own (large) id in the name is still made the same in every process.
    name, _ = named("ext_48213", 48213, monkeypatch)
    assert name.startswith("ext_p") and "48213" not in name, name


@pytest.mark.parametrize(
    "pool, other",
    [
        (("cudal1_l2_1_gelu", 2), ("cudal1_l2_1_gelu", 48213)),  # the profiling driver
        (("ext_2", 2), ("ext_48213", 48213)),  # f"ext_{os.getpid()}" in and out of a namespace
        (("ext_3071", 3071), ("ext_48213", 48213)),  # no namespaces: two large pids
    ],
)
def test_every_process_finds_the_pools_build(pool, other, monkeypatch):
    assert named(*pool, monkeypatch)[1] == named(*other, monkeypatch)[1]


def test_different_code_is_a_different_build(monkeypatch):
    monkeypatch.setattr(os, "getpid", lambda: 2)
    one, two = bound(name="ext_2"), bound(name="ext_2", cpp_sources=["int f() { return 2; }"])
    assert extensions._fingerprint(one, "ext_2") != extensions._fingerprint(two, "ext_2")
