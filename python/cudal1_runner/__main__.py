"""Entry point: ``python -m cudal1_runner --role reference|candidate|compile``.

Parses the role, guards the protocol streams, then answers one request per line until
``shutdown`` or end of input, exiting 0 in both cases.
"""

import argparse
import os
import sys

from . import ROLES
from .loading import tidy_paths


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m cudal1_runner", description=__doc__)
    parser.add_argument("--role", required=True, choices=ROLES)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = _parse(argv)
    if args.role == "compile":
        # Must precede the first torch import: the compile role never sees a GPU.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from . import wire

    channel = wire.install()
    tidy_paths()

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
