"""Where a correctness check's time goes at KernelBench's full sizes, and what a faster hand-over
of a candidate's output to the reference would cost (issue 12).

Run on the GPU machine from the repository root:

    PYTHONPATH=python python3 bench/io_probe.py [--mb 800] [--seeds 3] > io_probe.json

It times, per seed and for one float32 output of ``--mb`` MB:
- today's path: the candidate's capture, host copy and ``torch.save`` to /dev/shm, then the
  reference's ``compare_files`` (memory-mapped load, float64 comparison on the GPU, fingerprint);
- a raw-bytes path: pinned host copy, one ``write``, one ``readinto`` a pinned buffer, a copy to
  the GPU, and the same comparison made on the GPU in one pass;
- CUDA IPC: a second process shares its output's memory; this one opens it, checks the size
  that the sender claims against the driver's range of the allocation, and copies it.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from cudal1_runner import compare, outputs
from cudal1_runner.capture import capture, fingerprint


def clock():
    torch.cuda.synchronize()
    return time.perf_counter()


def timed(fn):
    t0 = clock()
    value = fn()
    return value, round((clock() - t0) * 1000, 1)


def today(out: torch.Tensor, expected_path: str, dir: str, seed: int) -> dict:
    row = {}
    captured, row["capture_ms"] = timed(lambda: capture(out))
    host, row["host_ms"] = timed(captured.host)
    path = os.path.join(dir, f"cand-{seed}.pt")
    _, row["save_ms"] = timed(lambda: outputs.save(path, host))
    _, row["fingerprint_ms"] = timed(lambda: captured.fingerprint(False))
    report, row["compare_files_ms"] = timed(lambda: compare.compare({"file": expected_path}, {"file": path}, 1e-2, 1e-2, torch.device("cuda")))
    row["mismatches"] = report["outputs"][0]["mismatches"]
    os.remove(path)
    return row


def raw(out: torch.Tensor, expected_gpu: torch.Tensor, dir: str, seed: int, pinned_out, pinned_in) -> dict:
    row = {}
    nbytes = out.numel() * out.element_size()
    _, row["d2h_pinned_ms"] = timed(lambda: pinned_out.copy_(out.reshape(-1).view(torch.uint8)))
    path = os.path.join(dir, f"raw-{seed}.bin")

    def write():
        with open(path, "wb") as f:
            f.write(memoryview(pinned_out.numpy()))

    _, row["write_ms"] = timed(write)

    def read():
        with open(path, "rb") as f:
            return f.readinto(memoryview(pinned_in.numpy()))

    got, row["readinto_pinned_ms"] = timed(read)
    assert got == nbytes
    gpu, row["h2d_ms"] = timed(lambda: pinned_in.to("cuda", non_blocking=True).view(out.dtype).reshape(out.shape))
    report, row["compare_gpu_ms"] = timed(lambda: compare.compare_tensors(0, expected_gpu, gpu, 1e-2, 1e-2, torch.device("cuda")))
    _, row["fingerprint_gpu_ms"] = timed(lambda: fingerprint([gpu], False))
    row["mismatches"] = report["mismatches"]
    os.remove(path)
    return row


SENDER = r"""
import pickle, sys, torch
n = int(sys.argv[1])
torch.manual_seed(1)
t = torch.randn(n, device="cuda")
h = t.untyped_storage()._share_cuda_()
sys.stdout.buffer.write(pickle.dumps(h)); sys.stdout.flush()
sys.stdin.read()
"""


def address_range(ptr: int):
    cuda = ctypes.CDLL("libcuda.so.1")
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    rc = cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
    return rc, base.value, size.value


def ipc(numel: int) -> dict:
    import pickle

    row = {}
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", SENDER, str(numel)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    handle = pickle.load(p.stdout)
    row["sender_ready_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    row["handle_fields"] = [type(x).__name__ for x in handle]
    device, mem_handle, storage_size, storage_offset = handle[0], handle[1], handle[2], handle[3]
    try:
        storage, row["open_ms"] = timed(lambda: torch.UntypedStorage._new_shared_cuda(*handle))
        rc, base, size = address_range(storage.data_ptr())
        row["range"] = {"rc": rc, "base_is_ptr_minus_offset": base == storage.data_ptr() - storage_offset, "size": size, "claimed": storage_size, "offset": storage_offset}
        shared = torch.empty(0, device="cuda", dtype=torch.uint8).set_(storage).view(torch.float32)
        copy, row["copy_d2d_ms"] = timed(lambda: shared.clone())
        torch.manual_seed(1)
        row["same_values"] = bool(torch.equal(copy, torch.randn(numel, device="cuda")))
        del shared, storage, copy
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
    # A lying sender: the same handle with a claimed size of four times the allocation.
    try:
        lie = (handle[0], handle[1], handle[2] * 4) + tuple(handle[3:])
        storage = torch.UntypedStorage._new_shared_cuda(*lie)
        rc, base, size = address_range(storage.data_ptr())
        row["lie"] = {"opened": True, "rc": rc, "driver_size": size, "claimed": lie[2], "caught_by_range": storage.data_ptr() + lie[2] > base + size}
        del storage
    except Exception as exc:
        row["lie"] = {"opened": False, "error": f"{type(exc).__name__}: {exc}"}
    # A forged handle: random bytes.
    try:
        forged = (handle[0], os.urandom(len(handle[1]))) + tuple(handle[2:])
        torch.UntypedStorage._new_shared_cuda(*forged)
        row["forged"] = "opened"
    except Exception as exc:
        row["forged"] = f"refused: {type(exc).__name__}: {str(exc)[:200]}"
    try:
        torch.cuda.synchronize()
        row["context_ok_after"] = bool(torch.ones(4, device="cuda").sum().item() == 4)
    except Exception as exc:
        row["context_ok_after"] = f"{type(exc).__name__}: {exc}"
    p.stdin.close()
    p.wait()
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=800)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    numel = args.mb * (1 << 20) // 4
    shape = (numel // 4096, 4096)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "mb": args.mb, "today": [], "raw": []}
    dir = tempfile.mkdtemp(dir="/dev/shm")
    pinned_out = torch.empty(numel * 4, dtype=torch.uint8, pin_memory=True)
    pinned_in = torch.empty(numel * 4, dtype=torch.uint8, pin_memory=True)
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        expected = torch.randn(shape, device="cuda")
        out = expected + 1e-4 * torch.randn(shape, device="cuda")
        expected_path = os.path.join(dir, f"expected-{seed}.pt")
        _, save_expected_ms = timed(lambda: outputs.save(expected_path, capture(expected, strict=True).host()))
        row = today(out, expected_path, dir, seed)
        row["save_expected_ms"] = save_expected_ms
        result["today"].append(row)
        result["raw"].append(raw(out, expected, dir, seed, pinned_out, pinned_in))
        os.remove(expected_path)
        del expected, out
    print(json.dumps({k: result[k] for k in ("today", "raw")}), file=sys.stderr, flush=True)
    result["ipc"] = ipc(numel)
    os.rmdir(dir)
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
