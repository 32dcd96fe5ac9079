"""The memory an op of the worker used at its peak, reported with its reply.

On CUDA: the most the caching allocator held for tensors (``max_memory_allocated``) and reserved
from the device (``max_memory_reserved``, what ``nvidia-smi`` counts, less the CUDA context) from
the op's start to its end, what it still reserves at the end (``held_bytes``: what the worker
keeps of the device while candidates are judged there), and the device's size. On the CPU: the
worker process's peak resident set size since it started (the kernel keeps no per-op peak, so it
never goes down)."""

import platform
import resource

import torch


def reset(device) -> None:
    """Starts an op's window: the device's peak counters restart at what is held now."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak(device) -> dict:
    """The op's peak: ``measure`` (``cuda_allocated`` or ``process_rss``), ``peak_bytes``,
    ``reserved_bytes``, ``held_bytes`` and ``total_bytes`` (the last three null on the CPU)."""
    if device.type == "cuda":
        return {
            "device": str(device),
            "measure": "cuda_allocated",
            "peak_bytes": int(torch.cuda.max_memory_allocated(device)),
            "reserved_bytes": int(torch.cuda.max_memory_reserved(device)),
            "held_bytes": int(torch.cuda.memory_reserved(device)),
            "total_bytes": int(torch.cuda.get_device_properties(device).total_memory),
        }
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports kibibytes, macOS bytes.
    scale = 1 if platform.system() == "Darwin" else 1024
    return {"device": str(device), "measure": "process_rss", "peak_bytes": int(rss) * scale,
            "reserved_bytes": None, "held_bytes": None, "total_bytes": None}
