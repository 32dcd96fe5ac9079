"""Entry point: guard the streams, then answer requests until ``shutdown`` or end of input."""

import argparse
import os
import sys


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m cudal1_model", description=__doc__)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = _parse(argv)
    from . import wire

    channel = wire.install()
    from .session import Session

    session = Session(threads=args.threads)
    wire.serve(channel, session.serve)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
