"""What a fork server (``zygote``) imports before it forks runners: torch, the runner's modules,
and PyTorch's first operation on meta tensors (``session.warm_meta``)."""

import torch  # noqa: F401

# Not `__main__`: a child runs it as its main module, fresh (runpy), as `python -m` would.
from . import precision, session, wire  # noqa: F401

session.warm_meta()
