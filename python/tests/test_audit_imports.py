"""Importing code is not looking for files: a library on sys.path under /tmp (a virtual
environment in a fresh clone there, say) must not be reported as ``file_access``, while opening a
saved tensor elsewhere under /tmp still is."""

import os
import shutil
import tempfile

import pytest
from conftest import PYTHON_DIR, REFERENCE, load


@pytest.fixture
def tmp_library():
    root = tempfile.mkdtemp(prefix="cudal1-lib-", dir="/tmp")
    with open(os.path.join(root, "cudal1_test_helper_mod.py"), "w") as f:
        f.write("def double(x):\n    return x * 2\n")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _findings(start_runner, write, tmp_path, library, forward_body):
    reference = write("ref.py", REFERENCE)
    candidate = REFERENCE.replace("class Model(", "class ModelNew(")
    # REFERENCE is indented by four spaces (``write`` dedents it): the body goes in at twelve.
    candidate = candidate.replace("def forward(self, x):", "def forward(self, x):\n" + forward_body.rstrip("\n"), 1)
    path = write("cand.py", candidate)
    runner = start_runner("candidate", env={"PYTHONPATH": f"{PYTHON_DIR}{os.pathsep}{library}"})
    load(runner, reference, path)
    return runner.ok("outputs", seeds=[1], dir=str(tmp_path / "o"))["results"][0]["findings"]


def test_importing_a_library_under_tmp_is_not_file_access(start_runner, write, tmp_path, tmp_library):
    body = "            import cudal1_test_helper_mod\n            cudal1_test_helper_mod.double(1)\n"
    found = _findings(start_runner, write, tmp_path, tmp_library, body)
    assert [f for f in found if f["kind"] == "file_access"] == [], found


def test_opening_a_saved_tensor_elsewhere_under_tmp_still_is(start_runner, write, tmp_path, tmp_library):
    other = tempfile.mkdtemp(prefix="cudal1-other-", dir="/tmp")
    try:
        target = os.path.join(other, "expected.pt")
        open(target, "wb").close()
        body = f"            open({target!r}, 'rb').close()\n"
        found = _findings(start_runner, write, tmp_path, tmp_library, body)
    finally:
        shutil.rmtree(other, ignore_errors=True)
    assert "file_access" in [f["kind"] for f in found], found
