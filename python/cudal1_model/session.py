"""One request in, one reply out: validation of every field, then the op. Knows the protocol and
which tensor function does each op; decides nothing about training."""

import math
import platform
import traceback

from . import PROTOCOL
from .wire import decode, refusal, reply

ROLES = ("system", "user", "assistant")
# Ops whose reply carries the memory they used at their peak (memory.py).
MEASURED = ("generate", "logprobs", "train_step")


class BadRequest(Exception):
    pass


class NotLoaded(Exception):
    pass


class LoadFailed(Exception):
    pass


def _error(rid, kind, message):
    return refusal(rid, {"kind": kind, "message": message})


def _number(req, key, default, lo, hi, lo_open=False):
    value = req.get(key, default)
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f"`{key}` must be a finite number")
    value = float(value)
    if not (value > lo if lo_open else value >= lo) or value > hi:
        raise BadRequest(f"`{key}` = {value} is out of range")
    return value


def _int(req, key, default, lo, hi=1 << 62):
    value = req.get(key, default)
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BadRequest(f"`{key}` must be an integer in [{lo}, {hi}]")
    return value


def _ids(value, what):
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        raise BadRequest(f"`{what}` must be a list of token ids")
    return value


def _messages(req):
    messages = req.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("`messages` must be a non-empty list")
    clean = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise BadRequest(f"message {i} must be {{\"role\": system|user|assistant, \"content\": str}}")
        clean.append({"role": m["role"], "content": m["content"]})
    return clean


def _seed(req):
    seed = req.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise BadRequest("`seed` must be a non-negative integer or null")
    # torch takes 64-bit seeds; fold larger ones in rather than fail.
    return None if seed is None else seed % (1 << 63)


def _sequences(req, kind=None):
    seqs = req.get("sequences")
    if not isinstance(seqs, list) or not seqs:
        raise BadRequest("`sequences` must be a non-empty list")
    clean = []
    for i, s in enumerate(seqs):
        if not isinstance(s, dict):
            raise BadRequest(f"sequence {i} must be an object")
        prompt = _ids(s.get("prompt_ids"), f"sequences[{i}].prompt_ids")
        completion = _ids(s.get("completion_ids"), f"sequences[{i}].completion_ids")
        if not prompt:
            raise BadRequest(f"sequence {i} has an empty prompt")
        item = {"prompt_ids": prompt, "completion_ids": completion}
        if kind == "pg":
            adv = s.get("advantage")
            if isinstance(adv, bool) or not isinstance(adv, (int, float)) or not math.isfinite(adv):
                raise BadRequest(f"sequence {i} needs a finite `advantage`")
            item["advantage"] = float(adv)
            for key in ("old_logprobs", "ref_logprobs"):
                if key in s and s[key] is not None:
                    vals = s[key]
                    if not isinstance(vals, list) or len(vals) != len(completion) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
                        raise BadRequest(f"sequence {i}: `{key}` must be {len(completion)} numbers, one per completion token")
                    item[key] = [float(v) for v in vals]
            if "old_logprobs" not in item:
                raise BadRequest(f"sequence {i} needs `old_logprobs` (from the policy that sampled it)")
        clean.append(item)
    return clean


class Session:
    def __init__(self, threads=None) -> None:
        self.threads = threads
        self.loaded = None

    def serve(self, line):
        """(reply, stop) for one request line."""
        try:
            req = decode(line)
        except ValueError as exc:
            return _error(None, "bad_request", f"not JSON: {exc}"), False
        if not isinstance(req, dict):
            return _error(None, "bad_request", "a request must be a JSON object"), False
        rid, op = req.get("id"), req.get("op")
        if op == "shutdown":
            return reply(rid, {}), True
        handler = getattr(self, f"_op_{op}", None) if isinstance(op, str) else None
        if handler is None:
            return _error(rid, "bad_request", f"unknown op {op!r}"), False
        try:
            if op in MEASURED and self.loaded is not None:
                from . import memory

                memory.reset(self.loaded.device)
                fields = handler(req)
                fields["memory"] = memory.peak(self.loaded.device)
                return reply(rid, fields), False
            return reply(rid, handler(req)), False
        except BadRequest as exc:
            return _error(rid, "bad_request", str(exc)), False
        except NotLoaded as exc:
            return _error(rid, "not_loaded", str(exc)), False
        except LoadFailed as exc:
            return _error(rid, "load_error", str(exc)), False
        except MemoryError as exc:
            return _error(rid, "oom", f"out of memory: {exc}"), False
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            kind = "oom" if "out of memory" in text.lower() else "runtime_error"
            return _error(rid, kind, f"{text}\n{traceback.format_exc(limit=8)}"), False

    def _need(self, training=False):
        if self.loaded is None:
            raise NotLoaded("no model loaded: send `load` first")
        if training and self.loaded.optimizer is None:
            raise NotLoaded("the model was loaded without an optimizer: `load` with `optimizer` to train")
        return self.loaded

    # --- ops -------------------------------------------------------------------------------

    def _op_hello(self, req):
        import torch

        reply = {"protocol": PROTOCOL, "python": platform.python_version(), "torch": torch.__version__,
                 "cuda": torch.cuda.is_available(), "loaded": self.loaded.describe() if self.loaded else None}
        try:
            import transformers

            reply["transformers"] = transformers.__version__
        except ImportError:
            reply["transformers"] = None
        try:
            import peft

            reply["peft"] = peft.__version__
        except ImportError:
            reply["peft"] = None
        return reply

    def _op_load(self, req):
        from .model import Loaded

        source = req.get("model")
        if not isinstance(source, dict) or not ({"hf", "gguf", "embedded"} & set(source)):
            raise BadRequest("`model` must be {\"hf\": DIR}, {\"gguf\": {\"dir\": DIR, \"file\": NAME}} or {\"embedded\": true}")
        if "hf" in source and not isinstance(source["hf"], str):
            raise BadRequest("`model.hf` must be a directory path")
        device = req.get("device", "cpu")
        if not isinstance(device, str):
            raise BadRequest("`device` must be a string such as cpu or cuda:0")
        dtype = req.get("dtype", "float32")
        if dtype not in ("float32", "bfloat16", "float16"):
            raise BadRequest("`dtype` must be float32, bfloat16 or float16")
        lora = req.get("lora")
        if lora is not None and not isinstance(lora, dict):
            raise BadRequest("`lora` must be an object ({r, alpha, dropout, target_modules}) or null")
        optimizer = req.get("optimizer")
        if optimizer is not None and not isinstance(optimizer, dict):
            raise BadRequest("`optimizer` must be an object ({lr, betas, weight_decay, eps}) or null")
        if self.threads:
            import torch

            torch.set_num_threads(self.threads)
        try:
            self.loaded = Loaded(source, device, dtype, lora, optimizer, bool(req.get("reference", False)), _seed(req))
        except (OSError, ValueError, ImportError) as exc:
            self.loaded = None
            raise LoadFailed(f"{type(exc).__name__}: {exc}") from exc
        return self.loaded.describe()

    def _op_encode(self, req):
        loaded = self._need()
        messages = _messages(req)
        reply = {"prompt_ids": loaded.encode(messages, bool(req.get("add_generation_prompt", True)))}
        completion = req.get("completion")
        if completion is not None:
            if not isinstance(completion, str):
                raise BadRequest("`completion` must be a string")
            reply["completion_ids"] = loaded.encode_completion(completion)
        return reply

    def _op_decode(self, req):
        loaded = self._need()
        return {"text": loaded.tokenizer.decode(_ids(req.get("ids"), "ids"), skip_special_tokens=True)}

    def _op_generate(self, req):
        from .sampling import ADAPTERS, DECODERS, batch_rows, generate, resolve_decoder

        loaded = self._need()
        prompts = req.get("prompts")
        if not isinstance(prompts, list) or not prompts:
            raise BadRequest("`prompts` must be a non-empty list of token-id lists")
        prompts = [_ids(p, f"prompts[{i}]") for i, p in enumerate(prompts)]
        if any(not p for p in prompts):
            raise BadRequest("a prompt is empty")
        n = _int(req, "n", 1, 1, 4096)
        temperature = _number(req, "temperature", 1.0, 0.0, 100.0)
        top_p = _number(req, "top_p", 1.0, 0.0, 1.0, lo_open=True)
        max_tokens = _int(req, "max_tokens", 256, 1, 1 << 20)
        seed = _seed(req)
        decoder = req.get("decoder", "auto")
        if decoder not in DECODERS:
            raise BadRequest(f"`decoder` must be one of {', '.join(DECODERS)}")
        try:
            resolve_decoder(loaded, decoder)
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        adapter = req.get("adapter", "auto")
        if adapter not in ADAPTERS:
            raise BadRequest(f"`adapter` must be one of {', '.join(ADAPTERS)}")
        # Prompts are decoded together, as many rows at once as `batch_rows` allows (by default,
        # what sampling.batch_rows finds for the device).
        rows = _int(req, "batch_rows", None, 1, 1 << 16)
        if rows is None:
            rows = batch_rows(loaded, max(len(p) for p in prompts), max_tokens)
        per_batch = max(1, rows // n)
        samples, used = [], {}
        for first in range(0, len(prompts), per_batch):
            chunk = prompts[first:first + per_batch]
            seeds = [None if seed is None else seed + first + k for k in range(len(chunk))]
            groups, used = generate(loaded, chunk, n, temperature, top_p, max_tokens, seeds, decoder, adapter)
            for k, group in enumerate(groups):
                for s in group:
                    s["prompt_index"] = first + k
                    s["text"] = loaded.tokenizer.decode(s["ids"], skip_special_tokens=True)
                    samples.append(s)
        return {"samples": samples, **used}

    def _op_chat(self, req):
        """One reply to a conversation (the embedded model of `optimize`)."""
        from .sampling import sample

        loaded = self._need()
        prompt = loaded.encode(_messages(req))
        max_tokens = _int(req, "max_tokens", 256, 1, 1 << 20)
        temperature = _number(req, "temperature", 1.0, 0.0, 100.0)
        top_p = _number(req, "top_p", 1.0, 0.0, 1.0, lo_open=True)
        (s,) = sample(loaded, prompt, 1, temperature, top_p, max_tokens, _seed(req))
        return {
            "text": loaded.tokenizer.decode(s["ids"], skip_special_tokens=True),
            "prompt_tokens": len(prompt),
            "completion_tokens": len(s["ids"]),
            "finish_reason": s["finish_reason"],
            "model": loaded.name,
        }

    def _op_logprobs(self, req):
        import torch

        from .losses import token_logprobs

        loaded = self._need()
        seqs = _sequences(req)
        temperature = _number(req, "temperature", 1.0, 0.0, 100.0)
        micro = _int(req, "micro_batch", 8, 1, 1 << 20)
        which = req.get("policy", "policy")
        out = []
        with torch.no_grad(), loaded.policy(which) as model:
            for start in range(0, len(seqs), micro):
                chunk = [s for s in seqs[start : start + micro] if s["completion_ids"]]
                lps = iter(token_logprobs(model, chunk, temperature, loaded.pad_id, loaded.device)) if chunk else iter(())
                for s in seqs[start : start + micro]:
                    out.append([float(x) for x in next(lps)] if s["completion_ids"] else [])
        return {"logprobs": out}

    def _op_train_step(self, req):
        import torch

        from .losses import AGGREGATIONS, sequence_terms, token_logprobs, weights

        loaded = self._need(training=True)
        kind = req.get("kind")
        if kind not in ("sft", "pg"):
            raise BadRequest("`kind` must be `sft` or `pg`")
        seqs = [s for s in _sequences(req, kind) if s["completion_ids"]]
        if not seqs:
            raise BadRequest("every sequence has an empty completion: nothing to train on")
        aggregation = req.get("aggregation", "token_mean")
        if aggregation not in AGGREGATIONS:
            raise BadRequest(f"`aggregation` must be one of {', '.join(AGGREGATIONS)}")
        normalizer = _number(req, "normalizer", None, 0.0, 1e12, lo_open=True)
        clip_low = _number(req, "clip_low", 0.2, 0.0, 1.0)
        clip_high = _number(req, "clip_high", clip_low, 0.0, 100.0)
        kl_coef = _number(req, "kl_coef", 0.0, 0.0, 1e6)
        if kind == "pg" and kl_coef > 0 and any("ref_logprobs" not in s for s in seqs):
            raise BadRequest("`kl_coef` > 0 needs `ref_logprobs` on every sequence")
        temperature = _number(req, "temperature", 1.0, 0.0, 100.0)
        micro = _int(req, "micro_batch", 8, 1, 1 << 20)
        max_grad_norm = _number(req, "max_grad_norm", 1.0, 0.0, 1e12, lo_open=True) if req.get("max_grad_norm", 1.0) is not None else None
        try:
            w = weights([len(s["completion_ids"]) for s in seqs], aggregation, normalizer)
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc

        model = loaded.model
        params = [p for p in model.parameters() if p.requires_grad]
        loaded.zero_grad()
        loss_sum, kl_sum, clipped, tokens, entropies = 0.0, 0.0, 0, 0, []
        for start in range(0, len(seqs), micro):
            chunk = list(range(start, min(start + micro, len(seqs))))
            lps = token_logprobs(model, [seqs[i] for i in chunk], temperature, loaded.pad_id, loaded.device, entropies)
            total = None
            for lp, i in zip(lps, chunk):
                terms, was_clipped, kl = sequence_terms(lp, seqs[i], kind, clip_low, clip_high, kl_coef)
                part = (terms * w[i]).sum()
                total = part if total is None else total + part
                kl_sum += float(kl.sum())
                clipped += int(was_clipped.sum())
                tokens += lp.numel()
            total.backward()
            loss_sum += float(total)
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm else float("inf"))
        # `apply: false` computes the loss and the gradients and leaves them in place, unapplied.
        if req.get("apply", True):
            loaded.optimizer_step()
            loaded.step += 1
        return {
            "loss": loss_sum,
            "kl": kl_sum / max(tokens, 1),
            "clip_fraction": clipped / max(tokens, 1),
            "entropy": sum(entropies) / max(tokens, 1),
            "grad_norm": float(norm),
            "tokens": tokens,
            "sequences": len(seqs),
            "step": loaded.step,
        }

    def _op_save(self, req):
        from .checkpoint import save

        loaded = self._need()
        directory = req.get("dir")
        if not isinstance(directory, str) or not directory:
            raise BadRequest("`dir` must be a directory path")
        return save(loaded, directory)

    def _op_restore(self, req):
        from .checkpoint import restore

        loaded = self._need()
        directory = req.get("dir")
        if not isinstance(directory, str) or not directory:
            raise BadRequest("`dir` must be a directory path")
        return restore(loaded, directory, bool(req.get("weights_only", False)))
