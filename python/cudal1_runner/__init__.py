"""cudal1 runner: executes reference and candidate PyTorch programs for the Rust side.

The runner speaks the line-delimited JSON protocol described in docs/protocol.md (version 1).
Start it as ``python -m cudal1_runner --role reference|candidate|compile``. It never decides a
verdict; it reports measurements, comparison statistics and findings.
"""

PROTOCOL_VERSION = 3
ROLES = ("reference", "candidate", "compile")
