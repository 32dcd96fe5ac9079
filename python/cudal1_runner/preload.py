"""What a fork server (``zygote``) imports before it forks runners: torch, the runner's modules,
and PyTorch's first operation on meta tensors (``session.warm_meta``)."""

import torch  # noqa: F401

from . import __main__, io_guard, precision, session  # noqa: F401

session.warm_meta()
