"""The fork server's pure parts in-process: which commands a child may run, and that a
confinement step that cannot be applied raises (so the child ends before it runs anything)."""

import subprocess
import sys
from pathlib import Path

import pytest

from cudal1_runner import confine
from cudal1_runner.zygote import _command


def test_commands_are_module_or_script_with_arguments():
    assert _command(["-m", "cudal1_runner", "--role", "candidate"]) == ("cudal1_runner", None, ["--role", "candidate"])
    assert _command(["-u", "/x/probe.py", "a"]) == (None, "/x/probe.py", ["a"])
    for bad in [[], ["-m"], ["-c", "print(1)"], ["-X", "dev", "x.py"], "x.py", [1]]:
        with pytest.raises(ValueError):
            _command(bad)


def _apply_in_child(steps: dict) -> subprocess.CompletedProcess:
    # In a child: a step that takes would confine this test process for good.
    code = f"from cudal1_runner import confine; confine.apply({steps!r}, None)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(Path(confine.__file__).parent.parent)})


def _steps(**over) -> dict:
    steps = {"cgroup_procs": [], "rlimits": [], "net": None, "drop_capabilities": False, "landlock": False,
             "own_task_access": 0, "seccomp": None, "syscalls": {"capset": 126, "landlock_add_rule": 445, "landlock_restrict_self": 446}}
    steps.update(over)
    return steps


def test_steps_that_cannot_be_applied_raise():
    assert _apply_in_child(_steps()).returncode == 0
    # A soft limit above the hard one is refused by the kernel.
    bad_limit = _apply_in_child(_steps(rlimits=[[4, 10, 5]]))
    assert bad_limit.returncode != 0 and "setrlimit" in bad_limit.stderr
    missing_cgroup = _apply_in_child(_steps(cgroup_procs=["/nonexistent/cgroup.procs"]))
    assert missing_cgroup.returncode != 0 and "No such file" in missing_cgroup.stderr
    no_ruleset = _apply_in_child(_steps(landlock=True))
    assert no_ruleset.returncode != 0 and "Landlock" in no_ruleset.stderr
