"""Run one program's model for a profiler: ``python -m cudal1_runner.profile``.

Nsight Compute runs this under ``--profile-from-start off``: the program is imported, its model
built and called ``--warmup`` times (extension builds, autotuning and caches happen there), then
``--calls`` more calls run between ``cudaProfilerStart`` and ``cudaProfilerStop``, so that only
their kernels are profiled. Inputs come from the task's ``get_inputs``/``get_init_inputs``, seeded
as the evaluator seeds them; the model is the candidate's ``ModelNew``, or the task's ``Model``
when no candidate is given.

What happened is written as one JSON object to ``--status`` (the profiler owns standard output):
``{"ok": true, "device": ..., "calls": N, "warmup": W, "built_here": [names]}`` or ``{"ok": false,
"kind": ..., "message": ...}``. On the CPU nothing is profiled; the run still loads and calls the
model, which checks a program before a GPU is spent on it.

This is a measuring aid, not a judge: it runs outside the evaluation sandbox (a profiler must
attach to it) and its results never decide a verdict.
"""

import argparse
import json
import os
import sys


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m cudal1_runner.profile", description=__doc__)
    parser.add_argument("--task", required=True, help="the task (reference) program")
    parser.add_argument("--candidate", help="the candidate program (its ModelNew); the task's Model if absent")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--status", required=True, help="where to write the JSON status")
    return parser.parse_args(argv)


def _write(path: str, status: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(status, f)
    os.replace(tmp, path)


def run(args) -> dict:
    import torch

    from . import extensions, inputs, precision
    from .errors import LOAD_ERROR, RUNTIME_ERROR, RunnerError, classify
    from .loading import load_module, require
    from .seeding import seed_all

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RunnerError(RUNTIME_ERROR, f"device {args.device} asked for, but PyTorch sees no CUDA device")
    precision.apply(False)
    task = load_module(os.path.abspath(args.task), "reference")
    require(task, ["get_inputs", "get_init_inputs"] + ([] if args.candidate else ["Model"]), "reference")
    source = inputs.InputSource(task)
    if args.candidate:
        extensions.install()
        program = load_module(os.path.abspath(args.candidate), "candidate")
        require(program, ["ModelNew"], "candidate")
        cls = vars(program)["ModelNew"]
    else:
        cls = vars(task)["Model"]
    precision.apply(False)

    def phase(what, fn):
        try:
            return fn()
        except RunnerError:
            raise
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            err = classify(exc, RUNTIME_ERROR if what.startswith("call") else LOAD_ERROR)
            raise RunnerError(err.kind, f"{what}: {err.message}") from None

    with torch.no_grad():
        seed_all(args.seed)
        init = phase("get_init_inputs()", source.get_init_inputs)
        seed_all(args.seed)
        model = phase("constructing the model", lambda: cls(*init).to(device).eval())
        values = phase("get_inputs()", lambda: inputs.generate(source, device, args.seed))

        def call():
            model(*values)
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        for i in range(args.warmup):
            phase(f"call {i + 1} (warm-up)", call)
        profiled = device.type == "cuda"
        if profiled:
            torch.cuda.profiler.start()
        try:
            for i in range(args.calls):
                phase(f"call {args.warmup + i + 1} (profiled)", call)
        finally:
            if profiled:
                torch.cuda.profiler.stop()
    # Builds the compile pool had not published were made here, in the warm-up: named, so that
    # the caller can say why this run was slow.
    return {
        "ok": True,
        "device": str(device),
        "profiled": profiled,
        "warmup": args.warmup,
        "calls": args.calls,
        "built_here": extensions.built_here(),
    }


def main(argv=None) -> None:
    args = _parse(argv)
    from .loading import tidy_paths

    tidy_paths()
    from .errors import INTERNAL, RunnerError, classify

    try:
        status = run(args)
    except RunnerError as err:
        status = {"ok": False, "kind": err.kind, "message": err.message}
    except BaseException as exc:  # SystemExit from the program included: it is reported, not obeyed
        if isinstance(exc, KeyboardInterrupt):
            raise
        err = classify(exc, INTERNAL)
        status = {"ok": False, "kind": err.kind, "message": err.message}
    _write(args.status, status)
    sys.stdout.flush()
    os._exit(0 if status["ok"] else 1)


if __name__ == "__main__":
    main()
