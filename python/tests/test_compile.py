"""The compile role with a real C++ ``load_inline`` build (slow: about a minute each)."""

import pytest
import torch

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


@pytest.mark.slow
def test_compile_builds_a_cpp_extension_that_the_candidate_role_then_uses(start_runner, write, reference, tmp_path):
    ext_dir = tmp_path / "extensions"
    env = {"TORCH_EXTENSIONS_DIR": str(ext_dir)}
    candidate = write("cpp_cand.py", CPP_CANDIDATE.replace("BODY", "1"))
    compiler = start_runner("compile", env)
    reply = compiler.ok("compile", candidate=candidate, reference=reference)
    assert reply["built"] == ["cudal1_test_add_one"]
    assert reply["compile_ms"] > 0
    # The failure after the build is not a compile error; its text is in the log.
    assert "no GPU visible after the build" in reply["log"]
    # verbose=True sends ninja's command lines to fd 1, which the role captured.
    assert "add_one" in reply["log"] and "c++" in reply["log"].lower()
    assert compiler.ok("hello")["devices"] == []

    cand = start_runner("candidate", env)
    load(cand, reference, candidate)
    result = cand.ok("outputs", seeds=[3], dir=str(tmp_path / "out"))["results"][0]
    (out,) = torch.load(result["path"], weights_only=True)["outputs"]
    torch.manual_seed(3)
    assert torch.equal(out, torch.randn(4, 8) + 1)


@pytest.mark.slow
def test_a_failing_build_is_a_compile_error_with_the_compiler_output(start_runner, write, reference, tmp_path):
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions")}
    candidate = write("bad_cpp.py", CPP_CANDIDATE.replace("BODY", "undeclared_thing_42"))
    compiler = start_runner("compile", env)
    err = compiler.error("compile", candidate=candidate, reference=reference)
    assert err["kind"] == "compile_error"
    assert "undeclared_thing_42" in err["message"] and "error" in err["message"]
    assert len(err["message"]) <= 20000
    assert compiler.ok("hello")["protocol"] == 1


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
