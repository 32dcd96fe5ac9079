"""Rollout throughput of the model worker's sampler, old against new, in one process (issue 30).

A randomly initialised Llama with SmolLM2-135M's shape (built here, nothing downloaded) decodes
batches with the sampling settings of the 2026-11-24 record (docs/bench/2026-11-24-gpu-session9:
temperature 0.5, top_p 1, at most 320 new tokens, groups of 4 samples of 2 prompts), and larger
batches, with (a) the OLD sampling code, loaded from a file (`--old`), and (b) this tree's
sampler (python/cudal1_model/sampling.py, the worker's own choice of decoder, and with `--lora`
its own choice for the adapter: merged on CUDA), and with `--lora` (c) this tree's sampler with
the adapter kept separate (`separate`), for the merge's speed-up. The end-of-sequence
id is one the model cannot draw, so every row decodes all `--max-tokens` tokens (the tokens
counted are those returned). Each measurement is a whole `generate` of the worker: the prompt
pass, every decoding step, the graph capture where there is one, and the copy of the tokens back.

On the GPU machine, from the repository root (no network, no cargo; python3 with torch and
transformers):
    git show 06526da:python/cudal1_model/sampling.py > .carry/old_sampling.py   (here, once)
    python3 bench/gpu_generate.py --old .carry/old_sampling.py --out "$OUT/generate.json"
On the CPU, a tiny model, to check that the script runs:
    python3 bench/gpu_generate.py --old .carry/old_sampling.py --tiny

It prints one JSON object: per batch shape and code, seconds per batch (each repetition; the
median, the best and the first), tokens per second, milliseconds per decoding step, the bound that memory bandwidth sets (the weights read
once per step, and the weights plus the mean key/value cache), how far the returned
log-probabilities are from what training recomputes (losses.token_logprobs, first rows), the
new code's speed-up over the old, and with `--lora` the merged adapter's over the separate one.
"""

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from types import SimpleNamespace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402

# SmolLM2-135M's configuration (its config.json): Llama, tied embeddings, grouped-query attention.
SMOLLM2_135M = dict(
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
    rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True, hidden_act="silu",
)
TINY = dict(
    vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
    rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, hidden_act="silu",
)
# Peak memory bandwidth (bytes/s) by device name; --bandwidth overrides.
BANDWIDTH = [("H200", 4.8e12), ("H100", 3.35e12), ("A100", 2.0e12)]


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def build_model(shape, dtype, device, lora, seed):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(**shape, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    config._attn_implementation = "sdpa"  # what from_pretrained picks, as the worker loads it
    model = LlamaForCausalLM(config).to(dtype=dtype, device=device).eval()
    if lora:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            sys.exit("--lora needs peft: pip install peft (or carry its wheel), or leave --lora out")
        model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=lora, lora_alpha=2 * lora,
                                                 lora_dropout=0.0, target_modules="all-linear"))
        # A trained adapter rather than peft's zero B, so that the LoRA branch is real work.
        for name, p in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.02)
        model = model.to(device).eval()
    return model


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sampler(module):
    """A function (loaded, prompts, n, temperature, top_p, max_tokens, seeds) -> list per prompt of
    samples, for a sampling module of any date: `sample_many` (batched, since 2026-11-24 05:43)
    or `sample` (one prompt at a time, before)."""
    if hasattr(module, "sample_many"):
        return module.sample_many
    if hasattr(module, "sample"):
        one = module.sample

        def many(loaded, prompts, n, temperature, top_p, max_tokens, seeds):
            return [one(loaded, p, n, temperature, top_p, max_tokens, s) for p, s in zip(prompts, seeds)]

        return many
    sys.exit(f"{module.__file__} has neither sample_many nor sample")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def recompute_gap(loaded, prompts, groups, temperature, rows):
    """Largest |returned - recomputed| log-probability over the first `rows` samples."""
    from cudal1_model.losses import token_logprobs

    seqs, returned = [], []
    for p, group in zip(prompts, groups):
        for s in group:
            if len(seqs) < rows and s["ids"]:
                seqs.append({"prompt_ids": p, "completion_ids": s["ids"]})
                returned.append(s["logprobs"])
    gap = 0.0
    with torch.no_grad():
        for i in range(0, len(seqs), 4):
            again = token_logprobs(loaded.model, seqs[i:i + 4], temperature, loaded.pad_id, loaded.device)
            for r, a in zip(returned[i:i + 4], again):
                gap = max(gap, max(abs(x - y) for x, y in zip(r, a.float().tolist())))
    return gap


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", required=True, help="the old sampling.py (e.g. `git show 06526da:...`)")
    p.add_argument("--tiny", action="store_true", help="a tiny model on the CPU: checks the script")
    p.add_argument("--device", default=None, help="default: cuda when available (cpu with --tiny)")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on a GPU, float32 on the CPU "
                   "(the worker's defaults)")
    p.add_argument("--shapes", default=None,
                   help="batches as PROMPTSxN, comma-separated (default 2x4,2x8,8x8,32x8)")
    p.add_argument("--max-tokens", type=int, default=None, help="default 320 (16 with --tiny)")
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--prompt-tokens", default="300-500",
                   help="prompt lengths, LO-HI (random per prompt, as a batch of tasks)")
    p.add_argument("--reps", type=int, default=3, help="repetitions of the new code per shape")
    p.add_argument("--old-reps", type=int, default=2, help="repetitions of the old code per shape")
    p.add_argument("--old-budget-s", type=float, default=300.0,
                   help="old code: no further repetition once its runs took this long in all")
    p.add_argument("--new-decoder", default="auto", choices=("auto", "dynamic", "static", "graphs"),
                   help="the new code's decoder (default: the worker's choice, graphs on CUDA)")
    p.add_argument("--new-adapter", default="auto", choices=("auto", "merged", "separate"),
                   help="with --lora, how the new code decodes the adapter (default: the worker's "
                   "choice, merged on CUDA; `merged` checks the merge on the CPU)")
    p.add_argument("--lora", type=int, default=0, help="a LoRA adapter of this rank on every linear "
                   "layer (the record's policy had rank 16; needs peft)")
    p.add_argument("--bandwidth", type=float, default=None, help="peak bytes/s (default by GPU name)")
    p.add_argument("--check-rows", type=int, default=8,
                   help="rows whose log-probabilities are recomputed as training does")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="also write the JSON here")
    a = p.parse_args(argv)

    device = torch.device(a.device or ("cpu" if a.tiny or not torch.cuda.is_available() else "cuda"))
    dtype_name = a.dtype or ("float32" if device.type == "cpu" else "bfloat16")
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype_name]
    shape = TINY if a.tiny else SMOLLM2_135M
    max_tokens = a.max_tokens or (16 if a.tiny else 320)
    shapes = a.shapes or ("2x4,2x8" if a.tiny else "2x4,2x8,8x8,32x8")
    shapes = [tuple(int(x) for x in s.lower().split("x")) for s in shapes.split(",")]
    lo, hi = (int(x) for x in a.prompt_tokens.split("-"))
    if a.tiny:
        lo, hi = min(lo, 40), min(hi, 60)

    import cudal1_model.sampling as new_module
    import transformers

    old_module = load_module(a.old, "old_sampling")
    old_sample = sampler(old_module)
    codes = {
        "old": lambda *args: (old_sample(*args), None),
        # The worker's own choice of decoder, and which one ran.
        "new": lambda *args: new_module.generate(*args, decoder=a.new_decoder, adapter=a.new_adapter),
    }
    if a.lora:
        # The adapter's two low-rank products kept apart in every layer (the default before the
        # merge), with the same decoder.
        codes["separate"] = lambda *args: new_module.generate(*args, decoder=a.new_decoder, adapter="separate")

    model = build_model(shape, dtype, device, a.lora, a.seed)
    # An end-of-sequence id outside the vocabulary: no row stops early.
    loaded = SimpleNamespace(model=model, device=device, pad_id=0, eos_ids={shape["vocab_size"]},
                             lora=bool(a.lora))
    params = sum(t.numel() for t in model.parameters())
    weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    heads = shape["num_attention_heads"]
    head_dim = shape["hidden_size"] // heads
    kv_bytes_per_token = (2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * head_dim
                          * torch.finfo(dtype).bits // 8)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    bandwidth = a.bandwidth or next((b for key, b in BANDWIDTH if key in name), 3.35e12)

    gen = torch.Generator().manual_seed(a.seed)

    def prompts_for(count):
        out = []
        for _ in range(count):
            length = int(torch.randint(lo, hi + 1, (1,), generator=gen))
            out.append(torch.randint(3, shape["vocab_size"], (length,), generator=gen).tolist())
        return out

    def run(code, prompts, n, seeds, tokens):
        sync(device)
        start = time.perf_counter()
        groups, info = codes[code](loaded, prompts, n, a.temperature, a.top_p, tokens, seeds)
        sync(device)
        return time.perf_counter() - start, groups, info

    # Warm-up (CUDA context, cuBLAS, the allocator): a short run of each code.
    warm = prompts_for(2)
    for code in codes:
        run(code, warm, 2, [1, 2], 8)

    results = []
    for n_prompts, n in shapes:
        rows = n_prompts * n
        prompts = prompts_for(n_prompts)
        width = max(len(x) for x in prompts)
        mean_kv = rows * (sum(len(x) for x in prompts) / n_prompts + max_tokens / 2) * kv_bytes_per_token
        step_bound = weight_bytes / bandwidth
        step_bound_kv = (weight_bytes + mean_kv) / bandwidth
        for code in [c for c in ("new", "separate", "old") if c in codes]:
            reps = a.old_reps if code == "old" else a.reps
            seconds, tokens, gap, spent = [], None, None, 0.0
            info = None
            for rep in range(reps):
                if code == "old" and spent >= a.old_budget_s:
                    break
                seeds = [1000 * rep + k for k in range(n_prompts)]
                s, groups, info = run(code, prompts, n, seeds, max_tokens)
                spent += s
                seconds.append(s)
                got = sum(len(x["ids"]) for g in groups for x in g)
                if tokens is not None and got != tokens:
                    log(f"warning: {code} returned {got} tokens, earlier {tokens}")
                tokens = got
                if rep == 0 and a.check_rows > 0:
                    gap = recompute_gap(loaded, prompts, groups, a.temperature, a.check_rows)
            if not seconds:
                continue
            med, best = statistics.median(seconds), min(seconds)
            line = {
                "code": code, "prompts": n_prompts, "n": n, "rows": rows,
                "prompt_width": width, "max_tokens": max_tokens,
                "tokens": tokens, "seconds": [round(s, 4) for s in seconds],
                "s_per_batch": round(med, 4), "s_best": round(best, 4), "s_first": round(seconds[0], 4),
                "tokens_per_s": round(tokens / med, 1), "tokens_per_s_best": round(tokens / best, 1),
                "ms_per_step": round(1000 * med / max_tokens, 3),
                "bound_tokens_per_s_weights": round(rows / step_bound, 1),
                "bound_tokens_per_s_weights_kv": round(rows / step_bound_kv, 1),
                "logprob_max_abs_gap_vs_training": gap,
            }
            if info is not None:
                line["decoder"] = info.get("decoder")
                if "adapter" in info:
                    line["adapter"] = info["adapter"]
            log(json.dumps(line))
            results.append(line)

    # The new code's speed-up: median over median, best run over best run, first over first (a
    # batch of new prompt widths, as every RL step is: the old code's growing cache then meets
    # sizes its allocator has not cached yet).
    def speedup(fast, slow):
        return {
            "median": round(slow["s_per_batch"] / fast["s_per_batch"], 2),
            "best": round(slow["s_best"] / fast["s_best"], 2),
            "first": round(slow["s_first"] / fast["s_first"], 2),
        }

    speedups, merge_speedups = {}, {}
    for n_prompts, n in shapes:
        by = {r["code"]: r for r in results if (r["prompts"], r["n"]) == (n_prompts, n)}
        if "old" in by and "new" in by:
            speedups[f"{n_prompts}x{n}"] = speedup(by["new"], by["old"])
        if "separate" in by and "new" in by:
            merge_speedups[f"{n_prompts}x{n}"] = speedup(by["new"], by["separate"])
    report = {
        "device": name, "torch": torch.__version__, "transformers": transformers.__version__,
        "python": platform.python_version(),
        "model": {"shape": "tiny" if a.tiny else "SmolLM2-135M (random weights)", "dtype": dtype_name,
                  "parameters": params, "weight_bytes": weight_bytes, "lora_rank": a.lora,
                  "kv_bytes_per_token": kv_bytes_per_token,
                  "attention": getattr(getattr(model, "config", None), "_attn_implementation", None)},
        "settings": {"temperature": a.temperature, "top_p": a.top_p, "max_tokens": max_tokens,
                     "prompt_tokens": [lo, hi], "old": os.path.abspath(a.old),
                     "bandwidth_bytes_per_s": bandwidth, "eos": "never drawn (outside the vocabulary)"},
        "results": results,
        "speedup_new_over_old": speedups,
    }
    if a.lora:
        report["speedup_merged_over_separate"] = merge_speedups
    text = json.dumps(report, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
