"""The candidate role's guard: each trick is reported as a finding by a real runner process,
and honest code that looks similar is not."""

import pytest

from conftest import REFERENCE, load

# A candidate whose class body is right; PRELUDE runs at import, BODY at the top of forward.
TEMPLATE = """
import torch
import torch.nn as nn
{prelude}

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.lin = nn.Linear(8, 8)
{init}

    def forward(self, x):
{body}
        return torch.relu(self.lin(x)) * self.scale
"""


def _indent(text, spaces):
    lines = text.strip("\n").splitlines() or ["pass"]
    return "\n".join(" " * spaces + line for line in lines)


def _program(prelude="", init="", body="pass"):
    return TEMPLATE.format(prelude=prelude, init=_indent(init, 8) if init else "", body=_indent(body, 8))


def _findings(start_runner, write, tmp_path, name, seeds=(1, 2, 3), **parts):
    reference = write("ref.py", REFERENCE)
    path = tmp_path / f"{name}.py"
    path.write_text(_program(**parts))
    runner = start_runner("candidate")
    load(runner, reference, str(path))
    found = []
    for seed in seeds:
        (result,) = runner.ok("outputs", seeds=[seed], dir=str(tmp_path / name))["results"]
        found += result["findings"]
    return found


def _kinds(found):
    return sorted({f["kind"] for f in found})


# (name, program parts, expected finding kinds)
TRICKS = [
    ("timer_at_import", {"prelude": "import time\ntime.perf_counter_ns = lambda: 0"}, ["tampered_timer"]),
    (
        "timer_hidden",
        {"prelude": "import importlib\nsetattr(importlib.import_module('ti' + 'me'), 'perf_' + 'counter', lambda: 0.0)"},
        ["tampered_timer"],
    ),
    ("allclose", {"prelude": "torch.allclose = lambda *a, **k: True"}, ["tampered_allclose"]),
    ("event_method", {"prelude": "torch.cuda.Event.elapsed_time = lambda self, end: 0.001"}, ["tampered_event"]),
    ("synchronize", {"prelude": "torch.cuda.synchronize = lambda *a, **k: None"}, ["tampered_synchronize"]),
    ("tensor_method", {"prelude": "torch.Tensor.clone = lambda self, **k: self"}, ["tampered_tensor"]),
    (
        "tf32_hidden_at_import",
        {"prelude": "exec(bytes.fromhex('746f7263682e6261636b656e64732e637564612e6d61746d756c2e616c6c6f775f7466333220' '3d2054727565').decode())"},
        ["tampered_tf32"],
    ),
    ("tf32_in_forward", {"body": "torch.set_float32_matmul_precision('medium')"}, ["tampered_tf32"]),
    ("gc_scan", {"body": "import gc\n_ = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]"}, ["gc_scan"]),
    ("gc_scan_exec", {"body": "exec('import gc; gc.get_referrers(x)')"}, ["gc_scan"]),
    ("frame_getframe", {"body": "import sys\n_ = sys._getframe(1).f_locals"}, ["frame_inspection"]),
    ("frame_inspect_stack", {"body": "import inspect\n_ = [f.function for f in inspect.stack()]"}, ["frame_inspection"]),
    (
        "frame_traceback",
        {"body": "try:\n    raise ValueError\nexcept ValueError as e:\n    _ = e.__traceback__.tb_frame.f_back"},
        ["frame_inspection"],
    ),
    (
        "thread_left_running",
        {"prelude": "import threading, time", "body": "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()"},
        ["background_thread"],
    ),
    (
        "raw_thread_left_running",
        {"prelude": "import _thread, time", "body": "_thread.start_new_thread(time.sleep, (30,))"},
        ["background_thread"],
    ),
    (
        "lists_the_work_root",
        {"prelude": "import os", "body": "try:\n    os.listdir(os.path.dirname(os.getcwd()))\nexcept OSError:\n    pass"},
        ["file_access"],
    ),
    (
        "globs_for_outputs",
        {"prelude": "import glob", "body": "_ = glob.glob('/tmp/*/reference-*/seed-*.pt')"},
        ["file_access"],
    ),
    (
        "opens_a_saved_tensor",
        {"body": "try:\n    open('/nonexistent/expected/seed-1.pt', 'rb')\nexcept OSError:\n    pass"},
        ["file_access"],
    ),
    (
        "thread_start_restored",
        {"prelude": "import _thread\n_w = _thread.start_new_thread\n_thread.start_new_thread = [c.cell_contents for c in _w.__closure__ if getattr(c.cell_contents, '__name__', '') == 'start_new_thread'][0]"},
        ["tampered_threads"],
    ),
    ("forward_swapped", {"body": "self.forward = lambda x: x * 0"}, ["model_patched"]),
    (
        "call_assigned_at_import",
        {"prelude": "def _fast(self, *args):\n    return self.forward(*args)"},
        ["model_patched"],
    ),
    (
        "reference_constant",
        {"prelude": "import sys\nfor m in list(sys.modules.values()):\n    if getattr(m, '__name__', '').startswith('_cudal1_reference'):\n        m.N = 2"},
        ["tampered_reference"],
    ),
    # Trust by file name (issue 13, class 6): code compiled under a made-up `site-packages` name is
    # still the candidate's; under a real library file's name it is a forgery.
    (
        "gc_scan_under_a_made_up_library_name",
        {"prelude": "_ns = {}\nexec(compile('def scan():\\n    import gc\\n    return len(gc.get_objects())', '/usr/lib/python3/site-packages/helpers/_scan.py', 'exec'), _ns)", "body": "_ns['scan']()"},
        ["gc_scan"],
    ),
    (
        "code_under_a_real_library_file_name",
        {"prelude": "import torch.functional\n_ns = {}\nexec(compile('def f(x):\\n    return x', torch.functional.__file__, 'exec'), _ns)"},
        ["forged_origin"],
    ),
    (
        "code_object_renamed_to_a_library_file",
        {"prelude": "import torch.functional\ndef _f(x):\n    return x\n_f.__code__ = _f.__code__.replace(co_filename=torch.functional.__file__)"},
        ["forged_origin"],
    ),
    # Frames handed to the candidate by the traceback module are still frames (class 8's limit).
    (
        "walks_a_traceback_for_frames",
        {"prelude": "import traceback", "body": "try:\n    raise ValueError\nexcept ValueError as e:\n    _ = [f.f_back for f, _ in traceback.walk_tb(e.__traceback__)]"},
        ["frame_inspection"],
    ),
    # The protocol's functions (class 1).
    ("replaces_os_write", {"prelude": "import os\n_w = os.write\nos.write = lambda fd, data: _w(fd, data)"}, ["tampered_protocol"]),
    ("wraps_json_loads", {"prelude": "import json\n_l = json.loads\njson.loads = lambda *a, **k: _l(*a, **k)"}, ["tampered_protocol"]),
    # A mode left active after a call (class 3).
    (
        "torch_function_mode_left_on",
        {"prelude": "from torch.overrides import TorchFunctionMode\nclass _M(TorchFunctionMode):\n    def __torch_function__(self, f, t, a=(), k=None):\n        return f(*a, **(k or {}))\n_M().__enter__()"},
        ["tampered_torch_mode"],
    ),
    (
        "dispatch_mode_left_on",
        {"prelude": "from torch.utils._python_dispatch import TorchDispatchMode\nclass _D(TorchDispatchMode):\n    def __torch_dispatch__(self, f, t, a=(), k=None):\n        return f(*a, **(k or {}))\n_D().__enter__()"},
        ["tampered_torch_mode"],
    ),
    # More intra-op threads than the runner was given (class 9).
    ("more_threads", {"prelude": "torch.set_num_threads(torch.get_num_threads() + 2)"}, ["extra_threads"]),
    # What the input path used to look up between calls, where the next inputs could be seen.
    ("random_seed_replaced", {"prelude": "import random\n_s = random.seed\nrandom.seed = lambda *a, **k: _s(*a, **k)"}, ["tampered_inputs"]),
    ("numpy_seed_replaced", {"prelude": "import numpy\n_s = numpy.random.seed\nnumpy.random.seed = lambda *a: _s(*a)"}, ["tampered_inputs"]),
    ("function_type_replaced", {"prelude": "import types\ntypes.FunctionType = type('F', (), {})"}, ["tampered_inputs"]),
    ("default_generator_replaced", {"prelude": "import torch.random\nsetattr(torch.random, 'default_' + 'generator', object())"}, ["tampered_inputs"]),
    ("audit_hook_added", {"prelude": "import sys\nsys.addaudithook(lambda event, args: None)"}, ["audit_hook"]),
]


@pytest.mark.parametrize("name,parts,kinds", TRICKS, ids=[t[0] for t in TRICKS])
def test_each_trick_is_reported(start_runner, write, tmp_path, name, parts, kinds):
    if name == "call_assigned_at_import":
        # The assignment follows the class body.
        src = _program(**parts) + "\nModelNew.__call__ = _fast\n"
        reference = write("ref.py", REFERENCE)
        path = tmp_path / "c.py"
        path.write_text(src)
        runner = start_runner("candidate")
        load(runner, reference, str(path))
        found = runner.ok("outputs", seeds=[1], dir=str(tmp_path / "o"))["results"][0]["findings"]
    else:
        found = _findings(start_runner, write, tmp_path, name, **parts)
    assert _kinds(found) == kinds, found
    assert all(f["detail"] for f in found)


def test_a_finding_is_reported_once_per_process(start_runner, write, tmp_path):
    found = _findings(start_runner, write, tmp_path, "twice", seeds=(1, 2, 3, 4), body="import gc\ngc.get_objects()")
    assert [f["kind"] for f in found] == ["gc_scan"]


HONEST = [
    # Library code that reads frames or starts threads on the candidate's behalf.
    ("typing_and_namedtuple", {"prelude": "import typing, collections, enum\nT = typing.TypeVar('T')\nP = collections.namedtuple('P', 'a b')\nclass C(enum.Enum):\n    A = 1"}),
    ("logging_a_warning", {"prelude": "import logging\nlogging.basicConfig()", "body": "logging.getLogger('cand').warning('computing')"}),
    ("joined_thread", {"prelude": "import threading", "body": "t = threading.Thread(target=lambda: None)\nt.start()\nt.join()"}),
    ("thread_pool_shut_down", {"prelude": "from concurrent.futures import ThreadPoolExecutor", "body": "with ThreadPoolExecutor(2) as ex:\n    list(ex.map(abs, [1, -2]))"}),
    ("tf32_explicitly_off", {"prelude": "torch.backends.cuda.matmul.allow_tf32 = False\ntorch.backends.cudnn.allow_tf32 = False"}),
    ("weights_prepared_at_construction", {"init": "self.register_buffer('wt', self.lin.weight.detach().t().contiguous())"}),
    ("own_get_inputs_and_constants", {"prelude": "N = 2\ndef get_inputs():\n    return [torch.randn(1, N)]"}),
    ("files_in_its_own_directory", {"prelude": "import os", "body": "torch.save(x, 'mine.pt')\n_ = torch.load('mine.pt')\n_ = os.listdir('.')"}),
    # An honest fallback that logs the failure it falls back from (issue 13, class 8).
    (
        "formats_a_traceback_and_logs_an_exception",
        {
            "prelude": "import logging, traceback",
            "body": "try:\n    raise NotImplementedError('no fast path')\nexcept NotImplementedError:\n    _ = traceback.format_exc()\n    logging.getLogger('cand').exception('falling back')\n    _ = traceback.extract_tb(__import__('sys').exc_info()[2])",
        },
    ),
    # Code of its own under its own names, and modules imported late, from a library and compiled
    # from its source on the spot.
    ("compiles_code_under_its_own_name", {"prelude": "_ns = {}\nexec(compile('def f(x):\\n    return x', 'my_helpers.py', 'exec'), _ns)", "body": "_ns['f'](x)"}),
    ("imports_library_modules_in_forward", {"body": "import torch.utils.benchmark\nimport json.tool"}),
    (
        "seeds_and_copies_with_what_the_input_path_uses",
        {
            "prelude": "import gc, random, types, weakref\nimport numpy as np",
            "body": "random.seed(1)\nnp.random.seed(2)\ntorch.manual_seed(3)\nf = types.FunctionType((lambda v: v).__code__, {}, 'f')\nb = torch.empty_like(x)\nb.copy_(f(x))\nweakref.finalize(b, lambda: None)\ngc.collect(0)",
        },
    ),
    # A mode entered and left inside the call.
    (
        "mode_inside_the_call",
        {"prelude": "from torch.overrides import TorchFunctionMode\nclass _M(TorchFunctionMode):\n    def __torch_function__(self, f, t, a=(), k=None):\n        return f(*a, **(k or {}))", "body": "with _M():\n    _ = x + 1"},
    ),
]


@pytest.mark.parametrize("name,parts", HONEST, ids=[h[0] for h in HONEST])
def test_honest_look_alikes_get_no_findings(start_runner, write, tmp_path, name, parts):
    assert _findings(start_runner, write, tmp_path, name, **parts) == []


def test_generators_during_a_call_do_not_reveal_the_input_seed(start_runner, write, tmp_path):
    # The candidate writes what it can learn from the generators into a file in its directory.
    log = tmp_path / "seeds.txt"
    body = f"open({str(log)!r}, 'a').write(str(torch.initial_seed()) + '\\n')"
    _findings(start_runner, write, tmp_path, "peek", seeds=(11, 12), body=body)
    seen = [int(s) for s in log.read_text().split()]
    assert len(seen) == 2 and 11 not in seen and 12 not in seen and seen[0] != seen[1]


def test_inputs_alternate_between_reused_and_fresh_buffers(start_runner, write, tmp_path):
    log = tmp_path / "ptrs.txt"
    body = f"open({str(log)!r}, 'a').write(f'{{x.data_ptr()}} {{id(x)}} {{float(x.sum())}}\\n')"
    _findings(start_runner, write, tmp_path, "ptrs", seeds=(1, 2, 3, 4), body=body)
    rows = [line.split() for line in log.read_text().splitlines()]
    ptr = [r[0] for r in rows]
    ident = [r[1] for r in rows]
    sums = [r[2] for r in rows]
    # Call 2 gets call 1's tensor (same object, same address) with new values ...
    assert ptr[1] == ptr[0] and ident[1] == ident[0] and sums[1] != sums[0]
    # ... call 3 a new one made while call 2's was alive, so at another address; call 4 reuses it.
    assert ptr[2] != ptr[1] and ptr[3] == ptr[2] and len(set(sums)) == 4


# --- in-process units --------------------------------------------------------------------------


def test_idle_meter_reports_cpu_burnt_between_requests():
    from cudal1_runner.idle import IdleMeter

    meter = IdleMeter(floor_s=0.05, share=0.25)
    meter.request_done()
    meter.request_started()  # no time between: nothing
    assert meter.findings() == []
    meter.request_done()
    x = 0
    import time

    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:  # burn CPU "between requests"
        x += 1
    meter.request_started()
    (found,) = meter.findings()
    assert found["kind"] == "busy_while_idle" and meter.cpu_s > 0.1
    assert meter.findings() == []  # once


def test_idle_meter_ignores_sleeping():
    import time

    from cudal1_runner.idle import IdleMeter

    meter = IdleMeter(floor_s=0.05, share=0.25)
    meter.request_done()
    time.sleep(0.2)
    meter.request_started()
    assert meter.findings() == [] and meter.wall_s >= 0.2


def test_frame_origins(tmp_path):
    import logging
    import os
    import sysconfig

    from cudal1_runner.origin import Origins

    task = tmp_path / "task.py"
    task.write_text("")
    o = Origins([str(task)])
    stdlib = sysconfig.get_paths()["stdlib"]
    torch_file = __import__("torch").__file__
    assert o.kind(str(task)) == "library"
    assert o.kind(logging.__file__) == "stdlib"
    assert o.kind(torch_file) == "library"
    assert o.kind(str(tmp_path / "candidate.py")) == "untrusted"
    assert o.kind("<string>") == "untrusted" and o.kind("<frozen importlib._bootstrap>") == "stdlib"
    assert o.kind(f"{stdlib}/inspect.py") == "stdlib"
    # Trust goes by the resolved location of a real file, not by a name that looks right.
    fake = tmp_path / "lib" / "python3" / "site-packages" / "fake.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("")
    assert o.kind(str(fake)) == "untrusted"
    assert o.kind("/usr/lib/python3/site-packages/made_up.py") == "untrusted"
    assert o.kind(os.path.dirname(torch_file) + "/no_such_module.py") == "untrusted"
    link = tmp_path / "looks_local.py"
    link.symlink_to(torch_file)
    assert o.kind(str(link)) == "library"  # it is torch's own file
    # A name the candidate made code under vouches for nothing any more.
    o.forge(torch_file)
    assert o.kind(torch_file) == "untrusted"


def test_an_output_still_being_written_differs_from_its_early_copy():
    import torch

    from cudal1_runner.capture import capture
    from cudal1_runner.outputs import readiness_findings

    out = torch.zeros(4)
    early = capture(out)
    assert readiness_findings(early, [out]) == []
    out += 1  # "the side stream finished after the call returned"
    (found,) = readiness_findings(early, [out])
    assert found["kind"] == "output_not_ready"
    nan = torch.full((2,), float("nan"))
    assert readiness_findings(capture(nan), [nan]) == []


def test_precision_changes_are_listed():
    import torch

    from cudal1_runner import precision

    precision.apply(False)
    before = precision.state()
    try:
        torch.set_float32_matmul_precision("medium")
        changed = precision.changes(before, precision.state())
        assert any("get_float32_matmul_precision" in c and "'medium'" in c for c in changed), changed
    finally:
        precision.apply(False)
    assert precision.changes(before, precision.state()) == []
