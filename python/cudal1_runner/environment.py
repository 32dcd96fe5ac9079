"""What the ``hello`` op reports: interpreter, torch, CUDA, devices, driver."""

import platform
import subprocess

import torch

from . import PROTOCOL_VERSION


def hello() -> dict:
    cuda = torch.cuda.is_available()
    return {
        "protocol": PROTOCOL_VERSION,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        # The CUDA version torch was built for, even when no GPU is visible.
        "torch_cuda_build": torch.version.cuda,
        "devices": _devices() if cuda else [],
        "driver": driver_version(),
    }


def _devices() -> list:
    found = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        found.append(
            {
                "index": index,
                "name": props.name,
                "capability": f"{props.major}.{props.minor}",
                "memory_bytes": int(props.total_memory),
                "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
            }
        )
    return found


def driver_version():
    """The NVIDIA driver version from NVML, else from nvidia-smi, else None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        pass
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except Exception:
        return None
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return lines[0] if done.returncode == 0 and lines else None
