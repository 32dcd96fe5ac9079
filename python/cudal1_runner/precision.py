"""Full fp32 precision: TF32 would let a candidate trade accuracy for speed silently."""

import torch


def apply(allow_tf32: bool = False) -> None:
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32
    # Also resets the newer per-backend settings (``fp32_precision``) of matmuls, oneDNN included.
    torch.set_float32_matmul_precision("high" if allow_tf32 else "highest")


def _getters():
    b = torch.backends
    yield "torch.backends.cuda.matmul.allow_tf32", lambda: b.cuda.matmul.allow_tf32
    yield "torch.backends.cudnn.allow_tf32", lambda: b.cudnn.allow_tf32
    yield "torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision
    yield "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction", lambda: b.cuda.matmul.allow_fp16_reduced_precision_reduction
    yield "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction", lambda: b.cuda.matmul.allow_bf16_reduced_precision_reduction
    # The per-backend API of PyTorch 2.9+; absent attributes read as errors on older versions.
    for path in ("fp32_precision", "cuda.matmul.fp32_precision", "cudnn.fp32_precision", "cudnn.conv.fp32_precision",
                 "cudnn.rnn.fp32_precision", "mkldnn.fp32_precision", "mkldnn.matmul.fp32_precision",
                 "mkldnn.conv.fp32_precision", "mkldnn.rnn.fp32_precision"):
        yield f"torch.backends.{path}", _path_getter(b, path)


def _path_getter(root, path: str):
    def get():
        value = root
        for part in path.split("."):
            value = getattr(value, part)
        return value

    return get


def state() -> dict:
    """Every precision setting as a string; one that cannot be read says why."""
    found = {}
    for name, get in _getters():
        try:
            found[name] = repr(get())
        except Exception as exc:  # mixing the old and new TF32 APIs makes reads raise
            found[name] = f"unreadable ({type(exc).__name__})"
    return found


def changes(before: dict, now: dict) -> list:
    """``name: old -> new`` for each setting that differs."""
    return [f"{k}: {before.get(k)} -> {now.get(k)}" for k in sorted(now) if before.get(k) != now.get(k)]
