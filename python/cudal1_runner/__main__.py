"""Entry point: ``python -m cudal1_runner --role reference|candidate|compile``.

Parses the role, guards the protocol streams, then answers one request per line until
``shutdown`` or end of input, exiting 0 in both cases.
"""

import argparse
import os
import sys

from . import ROLES


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m cudal1_runner", description=__doc__)
    parser.add_argument("--role", required=True, choices=ROLES)
    return parser.parse_args(argv)


def _tidy_paths() -> None:
    # -m puts the working directory first on sys.path; loaded programs must not import from
    # it by accident. Our own submodules resolve through the package's __path__ regardless.
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", cwd)]
    # Build tools (ninja) installed beside this interpreter must be found by load_inline.
    bindir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    if bindir and bindir not in path.split(os.pathsep):
        os.environ["PATH"] = path + os.pathsep + bindir if path else bindir


def main(argv=None) -> None:
    args = _parse(argv)
    if args.role == "compile":
        # Must precede the first torch import: the compile role never sees a GPU.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from . import wire

    channel = wire.install()
    _tidy_paths()

    from . import precision
    from .session import Session

    precision.apply(False)
    session = Session(args.role)
    if args.role == "reference":
        from .session import warm_meta

        warm_meta()
    # Bound before any task or candidate code runs (``wire.serve`` binds the channel's methods).
    wire.serve(channel, session.serve)
    sys.stderr.flush()
    # Skip interpreter teardown: atexit hooks of loaded code must not change the exit status.
    os._exit(0)


if __name__ == "__main__":
    main()
