"""Full fp32 precision: TF32 would let a candidate trade accuracy for speed silently."""

import torch


def apply(allow_tf32: bool = False) -> None:
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32
    torch.set_float32_matmul_precision("high" if allow_tf32 else "highest")
