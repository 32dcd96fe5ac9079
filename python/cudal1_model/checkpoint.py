"""Checkpoints written atomically: the trained weights (the LoRA adapter, or every weight), the
optimizer's state (with the float32 copies it steps of weights kept in bfloat16 or float16), the
random generators and the step count.

A checkpoint is written into a fresh sibling directory and renamed into place, so that a process
killed mid-write leaves the previous checkpoint whole: ``DIR`` always holds a complete one or
none at all.
"""

import json
import os
import random
import shutil

import torch

FILES = ("weights.pt", "optimizer.pt", "rng.pt", "state.json")
# What a restore of the trained weights alone reads (another stage's starting point).
WEIGHTS_ONLY = ("weights.pt", "state.json")
# Written beside them when the model trains weights kept below float32 (``Loaded.masters``).
MASTERS = "masters.pt"


def _trained_state(loaded):
    if loaded.lora:
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(loaded.model)
    return loaded.model.state_dict()


def save(loaded, directory: str) -> dict:
    directory = os.path.abspath(directory)
    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    tmp = f"{directory}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    torch.save({k: v.detach().cpu() for k, v in _trained_state(loaded).items()}, os.path.join(tmp, "weights.pt"))
    torch.save(loaded.optimizer.state_dict() if loaded.optimizer else None, os.path.join(tmp, "optimizer.pt"))
    masters = loaded.master_state()
    if masters:
        # The float32 copies the optimizer steps: rounded weights alone would not resume them.
        torch.save(masters, os.path.join(tmp, MASTERS))
    rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(rng, os.path.join(tmp, "rng.pt"))
    with open(os.path.join(tmp, "state.json"), "w") as f:
        json.dump({"step": loaded.step, "lora": loaded.lora, "model": loaded.name}, f)
    for name in FILES + ((MASTERS,) if masters else ()):
        with open(os.path.join(tmp, name), "rb") as f:
            os.fsync(f.fileno())
    old = f"{directory}.old-{os.getpid()}"
    if os.path.exists(directory):
        os.rename(directory, old)
    os.rename(tmp, directory)
    shutil.rmtree(old, ignore_errors=True)
    fd = os.open(parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"dir": directory, "step": loaded.step}


def restore(loaded, directory: str, weights_only: bool = False) -> dict:
    """Restores a checkpoint; ``weights_only`` takes the trained weights alone (a new stage that
    starts from another's result: fresh optimizer, step 0), and needs no more of it than the
    weights and ``state.json``: a run's starting point can travel without its optimizer's state,
    which is twice the size of a LoRA adapter."""
    needed = WEIGHTS_ONLY if weights_only else FILES
    missing = [f for f in needed if not os.path.isfile(os.path.join(directory, f))]
    if missing:
        raise FileNotFoundError(f"{directory} is not a complete checkpoint (missing {', '.join(missing)})")
    with open(os.path.join(directory, "state.json")) as f:
        state = json.load(f)
    if bool(state.get("lora")) != loaded.lora:
        raise ValueError(f"{directory} holds a {'LoRA' if state.get('lora') else 'full'} checkpoint; the loaded model is {'LoRA' if loaded.lora else 'full'}")
    weights = torch.load(os.path.join(directory, "weights.pt"), map_location=loaded.device, weights_only=True)
    if loaded.lora:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(loaded.model, weights)
    else:
        loaded.model.load_state_dict(weights)
    loaded.sync_masters()
    if weights_only:
        return {"dir": directory, "step": loaded.step}
    optimizer = torch.load(os.path.join(directory, "optimizer.pt"), map_location=loaded.device, weights_only=False)
    if optimizer is not None and loaded.optimizer is not None:
        loaded.optimizer.load_state_dict(optimizer)
    masters = os.path.join(directory, MASTERS)
    if os.path.isfile(masters) and loaded.optimizer is not None:
        loaded.load_master_state(torch.load(masters, map_location="cpu", weights_only=True))
    rng = torch.load(os.path.join(directory, "rng.pt"), weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    loaded.step = int(state["step"])
    return {"dir": directory, "step": loaded.step}
