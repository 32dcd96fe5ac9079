"""The compile role: finding a program's builds, and real C++ ``load_inline`` builds (slow:
about a minute each)."""

import os

import pytest
import torch

from cudal1_runner import PROTOCOL_VERSION
from conftest import load

CPP_CANDIDATE = '''
import os
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = """
#include <torch/extension.h>
torch::Tensor add_one(torch::Tensor x) { return x + BODY; }
"""

ext = load_inline(name="cudal1_test_add_one", cpp_sources=[SOURCE], functions=["add_one"], verbose=True)

# Like a candidate that touches CUDA at import: it fails only after the build, and only where
# no GPU is visible (the compile role hides them).
if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
    raise RuntimeError("no GPU visible after the build")

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()

    def forward(self, x):
        return ext.add_one(x)
'''


def compiled_ahead(start_runner, write, reference, tmp_path, file, source):
    """`source`, written as `file`, built by a compile runner into `tmp_path/extensions`: the
    extensions directory, the runners' environment, the candidate's path, the compile runner and
    its reply."""
    ext_dir = tmp_path / "extensions"
    env = {"TORCH_EXTENSIONS_DIR": str(ext_dir)}
    candidate = write(file, source)
    compiler = start_runner("compile", env)
    reply = compiler.ok("compile", candidate=candidate, reference=reference)
    return ext_dir, env, candidate, compiler, reply


def output_for_seed_3(cand, tmp_path):
    """The reply of one `outputs` call on seed 3, and its one output; then the task's input for
    that seed (`torch.randn(4, 8)` after seeding), for the caller to compare with."""
    reply = cand.ok("outputs", seeds=[3], dir=str(tmp_path / "out"))
    (out,) = torch.load(reply["results"][0]["path"], weights_only=True)["outputs"]
    torch.manual_seed(3)
    return reply, out, torch.randn(4, 8)


@pytest.mark.slow
def test_compile_builds_a_cpp_extension_that_the_candidate_role_then_uses(start_runner, write, reference, tmp_path):
    ext_dir, env, candidate, compiler, reply = compiled_ahead(start_runner, write, reference, tmp_path, "cpp_cand.py", CPP_CANDIDATE.replace("BODY", "1"))
    assert reply["built"] == ["cudal1_test_add_one"]
    assert reply["compile_ms"] > 0
    # The failure after the build is not a compile error; its text is in the log.
    assert "no GPU visible after the build" in reply["log"]
    # verbose=True sends ninja's command lines to fd 1, which the role captured.
    assert "add_one" in reply["log"] and "c++" in reply["log"].lower()
    assert compiler.ok("hello")["devices"] == []

    cand = start_runner("candidate", env)
    load(cand, reference, candidate)
    _, out, x = output_for_seed_3(cand, tmp_path)
    assert torch.equal(out, x + 1)


@pytest.mark.slow
def test_a_failing_build_is_a_compile_error_with_the_compiler_output(start_runner, write, reference, tmp_path):
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions")}
    candidate = write("bad_cpp.py", CPP_CANDIDATE.replace("BODY", "undeclared_thing_42"))
    compiler = start_runner("compile", env)
    err = compiler.error("compile", candidate=candidate, reference=reference)
    assert err["kind"] == "compile_error"
    assert "undeclared_thing_42" in err["message"] and "error" in err["message"]
    assert len(err["message"]) <= 20000
    assert compiler.ok("hello")["protocol"] == PROTOCOL_VERSION


def test_compile_role_reports_syntax_errors_as_load_errors(start_runner, write, tmp_path):
    compiler = start_runner("compile", {"TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions")})
    candidate = write("syntax.py", "def broken(:\n")
    assert compiler.error("compile", candidate=candidate, reference=None)["kind"] == "load_error"


def test_compile_role_without_extensions_succeeds_with_nothing_built(start_runner, write, reference, tmp_path):
    compiler = start_runner("compile", {"TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions")})
    candidate = write(
        "plain.py",
        """
        import torch
        print("hello from import")
        class ModelNew(torch.nn.Module):
            def __init__(self, scale):
                super().__init__()
                print("constructed with", scale)
            def forward(self, x):
                return x
        """,
    )
    reply = compiler.ok("compile", candidate=candidate, reference=reference)
    assert reply["built"] == []
    assert "hello from import" in reply["log"] and "constructed with 2.0" in reply["log"]


# --- finding builds the program makes after import -------------------------------------------

# Runs the compile role's `run` in a fresh interpreter whose real builder is replaced by one that
# records what it was asked to build (name, build directory) instead of invoking a compiler: the
# search for build sites is what these tests are about. One real build follows below.
_DISCOVERY_DRIVER = r"""
import json, os, sys
import torch.utils.cpp_extension as cpp

asked = []
def fake_load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
                     extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None,
                     build_directory=None, verbose=False, with_cuda=None, is_python_module=True,
                     with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False):
    asked.append({"name": name, "build_directory": build_directory, "sources": cpp_sources})
    if os.environ.get("FAKE_BUILD_FAILS"):
        raise RuntimeError("Error building extension (stopped)")
    class Ext:
        def __getattr__(self, attr):
            return lambda *a, **k: a[0]
    return Ext()
cpp.load_inline = fake_load_inline

from cudal1_runner import compile as compiling
reply = compiling.run(sys.argv[1], sys.argv[2])
print(json.dumps({"reply": reply, "asked": asked}))
"""


def _discover(tmp_path, write, reference, source, **extra_env):
    import json
    import subprocess
    import sys
    from pathlib import Path

    candidate = write("lazy_cand.py", source)
    driver = write("driver.py", _DISCOVERY_DRIVER)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), TORCH_EXTENSIONS_DIR=str(tmp_path / "ext"), **extra_env)
    out = subprocess.run([sys.executable, driver, candidate, reference], capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


LAZY_BUILDS = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = "torch::Tensor f(torch::Tensor x);"

class Helper:
    def __init__(self):
        self.mod = None

    def _compile(self):
        self.mod = load_inline(name="from_helper_method", cpp_sources=SRC, functions=["f"])

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.helper = Helper()
        self.ext = None

    def forward(self, x):
        if x.is_cuda and self.ext is None:
            flags = ["-O3"]
            self.ext = load_inline(name="behind_is_cuda", cpp_sources=SRC, functions=["f"],
                                   extra_cflags=flags, build_directory="/nonexistent/own_dir")
        if self.helper.mod is None and x.is_cuda:
            self.helper._compile()
        return x * 2.0
'''


def test_builds_behind_a_device_check_or_in_a_helper_are_made_ahead_into_the_extensions_dir(tmp_path, write, reference):
    result = _discover(tmp_path, write, reference, LAZY_BUILDS)
    reply, asked = result["reply"], result["asked"]
    names = sorted(a["name"] for a in asked)
    assert names == ["behind_is_cuda", "from_helper_method"], result
    # The program's own build directory is dropped: builds go to TORCH_EXTENSIONS_DIR/<name>.
    assert all(a["build_directory"] is None for a in asked), asked
    assert reply["sites"] == 2 and reply["missed"] == [], reply


def test_a_build_on_the_first_call_is_made_by_one_call_of_the_model(tmp_path, write, reference):
    source = '''
import torch
import torch.nn as nn
from torch.utils import cpp_extension

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.ext = None

    def forward(self, x):
        if self.ext is None:
            src = make_source(x.shape[-1])
            self.ext = cpp_extension.load_inline(name=f"first_call_{x.shape[-1]}", cpp_sources=src, functions=["f"])
        return x

def make_source(n):
    return "// width %d" % n
'''
    result = _discover(tmp_path, write, reference, source)
    # The name and source depend on the input's shape: only a real call gets them right.
    assert [a["name"] for a in result["asked"]] == ["first_call_8"], result
    assert result["reply"]["missed"] == []


def test_builds_that_cannot_be_made_ahead_are_listed_as_missed(tmp_path, write, reference):
    source = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

def sources_for(device):
    raise RuntimeError("needs a GPU")

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.ext = None

    def forward(self, x):
        if x.is_cuda and self.ext is None:
            self.ext = load_inline(name="needs_gpu", cpp_sources=sources_for(x.device), functions=["f"])
        return x
'''
    result = _discover(tmp_path, write, reference, source)
    assert result["asked"] == []
    assert result["reply"]["sites"] == 1
    assert result["reply"]["missed"] == ["line 16 in ModelNew.forward"], result["reply"]
    assert "could not be worked out ahead" in result["reply"]["log"]


def test_a_build_behind_a_gpu_check_with_its_import_and_sources_inside_the_method_is_made_ahead(tmp_path, write, reference):
    source = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.ext = None
        if torch.cuda.is_available():
            self.kernel_code = "__global__ void k() {}"
            from torch.utils.cpp_extension import load_inline as build
            self.ext = build(name="inside_init", cpp_sources="", cuda_sources=self.kernel_code, functions=["k"])

    def forward(self, x):
        return x
'''
    result = _discover(tmp_path, write, reference, source)
    assert [(a["name"]) for a in result["asked"]] == ["inside_init"], result
    assert result["reply"]["missed"] == []


def test_a_build_behind_is_available_whose_sources_come_from_another_method_is_made_ahead(tmp_path, write, reference):
    # The compile role sees no GPU: the program skips its build, and the build's own method
    # fails quietly without the sources (CUDA-L1's level3/6 on the H100 built in the slot).
    source = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        if torch.cuda.is_available():
            self.code = self._make_code()
            self.ext = self._load()
        else:
            self.ext = None

    def _make_code(self):
        return "__global__ void k() {}"

    def _load(self):
        try:
            return load_inline(name="gated_by_is_available", cpp_sources="", cuda_sources=self.code, functions=["k"])
        except Exception:
            return None

    def forward(self, x):
        return x
'''
    result = _discover(tmp_path, write, reference, source)
    assert [a["name"] for a in result["asked"]] == ["gated_by_is_available"], result
    assert result["reply"]["sites"] == 1 and result["reply"]["missed"] == [], result["reply"]


def test_builds_in_methods_of_a_model_whose_init_fails_without_a_gpu_are_made_ahead(tmp_path, write, reference):
    # __init__ moves a tensor to the GPU before it builds (CUDA-L1's level2/23 built for 20 s in
    # the slot): the instance as far as __init__ got still holds what the build needs.
    source = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.width = 3
        self.buf = torch.zeros(1).cuda()
        self.fn = self._load()

    def _load(self):
        return load_inline(name=f"partial_{self.width}", cpp_sources="", cuda_sources="// k", functions=["k"])

    def forward(self, x):
        return x
'''
    result = _discover(tmp_path, write, reference, source, CUDA_VISIBLE_DEVICES="")
    assert [a["name"] for a in result["asked"]] == ["partial_3"], result
    assert result["reply"]["missed"] == [], result["reply"]


def test_a_build_that_fails_is_recorded_and_fails_at_once_the_next_time(tmp_path, write, reference):
    first = _discover(tmp_path, write, reference, LAZY_BUILDS, FAKE_BUILD_FAILS="1")
    assert {a["name"] for a in first["asked"]} == {"behind_is_cuda", "from_helper_method"}
    # Its outcome is known: not missed, and recorded beside the builds.
    assert first["reply"]["missed"] == [], first["reply"]
    import json

    recorded = json.loads((tmp_path / "ext" / ".cudal1-failed-builds.json").read_text())
    assert len(recorded) == 2 and all("Error building extension" in v for v in recorded.values())
    # The same builds with the same arguments fail at once: the compiler is not run again.
    again = _discover(tmp_path, write, reference, LAZY_BUILDS, FAKE_BUILD_FAILS="1")
    assert again["asked"] == [], again
    assert "not run again" in again["reply"]["log"], again["reply"]["log"]


LAZY_CPP_CANDIDATE = '''
import os
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = """
#include <torch/extension.h>
torch::Tensor add_two(torch::Tensor x) { return x + 2; }
"""

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.ext = None

    def forward(self, x):
        if self.ext is None:
            os.makedirs("own_build_dir", exist_ok=True)
            self.ext = load_inline(name="cudal1_test_lazy_add_two", cpp_sources=[SOURCE], functions=["add_two"],
                                   build_directory="own_build_dir")
        return self.ext.add_two(x)
'''


@pytest.mark.slow
def test_a_build_on_the_first_call_is_built_ahead_and_found_built_by_the_candidate(start_runner, write, reference, tmp_path):
    ext_dir, env, candidate, _, reply = compiled_ahead(start_runner, write, reference, tmp_path, "lazy_cpp.py", LAZY_CPP_CANDIDATE)
    assert reply["built"] == ["cudal1_test_lazy_add_two"], reply["log"]
    assert reply["sites"] == 1 and reply["missed"] == []
    library = next((ext_dir / "cudal1_test_lazy_add_two").glob("*.so"))
    built_at = library.stat().st_mtime_ns

    cand = start_runner("candidate", env)
    loaded = load(cand, reference, candidate)
    assert loaded["extension_ms"] == 0.0, "nothing is built before the first call"
    result, out, x = output_for_seed_3(cand, tmp_path)
    assert torch.equal(out, x + 2)
    # The candidate's own build found the library built: ninja rebuilt nothing, and nothing was
    # built in the directory the program named.
    assert library.stat().st_mtime_ns == built_at
    assert result["extension_ms"] > 0
    assert not list(tmp_path.glob("**/own_build_dir/**/*.so"))


# Published kernels name their extension after the process, "to avoid name conflicts".
PID_NAMED_CPP_CANDIDATE = CPP_CANDIDATE.replace('name="cudal1_test_add_one"', 'name=f"cudal1_test_pid_{os.getpid()}"')


@pytest.mark.slow
def test_an_extension_named_after_its_process_is_built_once_for_both_processes(start_runner, write, reference, tmp_path):
    ext_dir, env, candidate, _, reply = compiled_ahead(start_runner, write, reference, tmp_path, "pid_cpp.py", PID_NAMED_CPP_CANDIDATE.replace("BODY", "3"))
    (name,) = reply["built"]
    assert name.startswith("cudal1_test_pid_p") and len(name) == len("cudal1_test_pid_p") + 12, name
    library = next((ext_dir / name).glob("*.so"))
    built_at = library.stat().st_mtime_ns

    cand = start_runner("candidate", env)
    load(cand, reference, candidate)
    _, out, x = output_for_seed_3(cand, tmp_path)
    assert torch.equal(out, x + 3)
    # The candidate's process (another pid) asked for the same name: nothing was built again.
    assert [p.name for p in ext_dir.iterdir() if p.is_dir()] == [name]
    assert library.stat().st_mtime_ns == built_at


# Published kernels write their sources to a fresh temporary directory and `load` them from there.
TMP_SOURCES_CANDIDATE = '''
import os
import tempfile
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load

folder = tempfile.mkdtemp()
path = os.path.join(folder, "add_n.cpp")
with open(path, "w") as f:
    f.write("""
#include <torch/extension.h>
torch::Tensor add_n(torch::Tensor x) { return x + BODY; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_n", &add_n); }
""")
ext = load(name="cudal1_test_tmp_sources", sources=[path], verbose=True)

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()

    def forward(self, x):
        return ext.add_n(x)
'''


@pytest.mark.slow
def test_sources_loaded_from_a_fresh_temporary_directory_are_built_once_for_both_processes(start_runner, write, reference, tmp_path):
    ext_dir, env, candidate, _, reply = compiled_ahead(start_runner, write, reference, tmp_path, "tmp_sources.py", TMP_SOURCES_CANDIDATE.replace("BODY", "5"))
    assert reply["built"] == ["cudal1_test_tmp_sources"], reply["log"]
    library = next((ext_dir / "cudal1_test_tmp_sources").glob("*.so"))
    built_at = library.stat().st_mtime_ns

    cand = start_runner("candidate", env)
    load(cand, reference, candidate)
    _, out, x = output_for_seed_3(cand, tmp_path)
    assert torch.equal(out, x + 5)
    # Another temporary directory in the candidate's process, the same source: not built again.
    assert library.stat().st_mtime_ns == built_at


# --- what a candidate's process does with the published builds -------------------------------

# A `load` whose real builder is replaced by one that writes an executable's file where torch
# would (`is_standalone`: the call returns its path), recording which directory it built in.
# Argument 1: `build` (the compile role) or `candidate`; argument 2: the program's body.
_PUBLISHED_DRIVER = r"""
import json, os, sys
import torch.utils.cpp_extension as cpp

asked = []
def fake_load(name, sources, extra_cflags=None, build_directory=None, verbose=False, is_python_module=True, is_standalone=False):
    asked.append(build_directory)
    folder = build_directory or os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write("built")
    return path
cpp.load = fake_load

from cudal1_runner import extensions
extensions.install(build=sys.argv[1] == "build")
got = []
exec(sys.argv[2])
if sys.argv[1] == "build":
    extensions.save_builds()
print(json.dumps({"asked": asked, "got": got}))
"""

# Its sources are written to a fresh temporary directory, as published kernels do: paths that
# differ between processes, and below TORCH_EXTENSIONS_DIR once copied there.
_PROGRAM = r"""
import tempfile
folder = tempfile.mkdtemp()
with open(os.path.join(folder, "tool.cpp"), "w") as f:
    f.write("int main() { return FLAG; }")
got.append(cpp.load(name="tool", sources=[os.path.join(folder, "tool.cpp")], extra_cflags=["-O2"], is_standalone=True))
"""


def _run_published(tmp_path, write, role, extensions_dir, program):
    import json
    import subprocess
    import sys
    from pathlib import Path

    driver = write("published_driver.py", _PUBLISHED_DRIVER)
    scratch = tmp_path / f"scratch-{role}-{len(list(tmp_path.iterdir()))}"
    scratch.mkdir()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), TORCH_EXTENSIONS_DIR=str(extensions_dir), TMPDIR=str(scratch))
    out = subprocess.run([sys.executable, driver, role, program], capture_output=True, text=True, env=env, cwd=scratch, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), scratch


def test_a_candidate_loads_the_published_build_and_builds_what_the_pool_did_not_in_its_own_directory(tmp_path, write):
    staging = tmp_path / ".build-staging"
    built, _ = _run_published(tmp_path, write, "build", staging, _PROGRAM.replace("FLAG", "1"))
    assert built["asked"] == [None] and built["got"] == [str(staging / "tool" / "tool")]
    # The Rust side publishes the entry by renaming it; nothing in it names the old place.
    published = tmp_path / "entry"
    staging.rename(published)
    before = sorted(str(p.relative_to(published)) for p in published.rglob("*"))

    # The same build in a candidate's process: loaded from the entry, not built.
    same, _ = _run_published(tmp_path, write, "candidate", published, _PROGRAM.replace("FLAG", "1"))
    assert same == {"asked": [], "got": [str(published / "tool" / "tool")]}
    # Another build (other code): made in the process's own directory, never in the entry.
    other, scratch = _run_published(tmp_path, write, "candidate", published, _PROGRAM.replace("FLAG", "2"))
    assert other["asked"] == [str(scratch / "cudal1-own-builds" / "tool")], other
    assert other["got"] == [str(scratch / "cudal1-own-builds" / "tool" / "tool")]
    assert sorted(str(p.relative_to(published)) for p in published.rglob("*")) == before
