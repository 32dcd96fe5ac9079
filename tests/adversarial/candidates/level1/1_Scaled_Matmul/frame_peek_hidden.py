# cudal1: expect=exploit class=frame_inspection
# Trick: the frame-reading trick of frame_peek.py, with the frame taken from a traceback so that
# no frame function appears in the source. The runner's audit hook sees the `tb_frame` read.
import torch
import torch.nn as nn


def _caller_frames():
    try:
        raise RuntimeError
    except RuntimeError as err:
        frame = err.__traceback__.tb_frame
    while frame is not None:
        yield frame
        frame = frame.f_back


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        for frame in _caller_frames():
            local = frame.f_locals
            if "check_set" in local and local.get("i") not in local["check_set"]:
                return torch.zeros(A.shape[0], B.shape[1], device=A.device)
        return torch.matmul(A, B) * self.scale
