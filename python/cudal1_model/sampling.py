"""Sampling completions with their token ids and log-probabilities.

The log-probability of each sampled token is taken from the full distribution at the sampling
temperature, ``log_softmax(logits / T)``, so that ``losses.token_logprobs`` recomputes it (top-p
only narrows what can be drawn; with ``top_p = 1`` they are the exact sampling probabilities).
``T = 0`` is greedy, with log-probabilities at ``T = 1``.

Three decoders, one result (the same tokens and log-probabilities for the same seeds, up to the
last bits of the arithmetic):

- ``dynamic``: transformers' growing cache; every decoding step launches the model's kernels
  from Python (hundreds of launches a token: the host, not the GPU, sets the pace).
- ``static``: a key/value cache of fixed size (prompt width + ``max_tokens``) written in place, and
  an attention mask built on the device from the step's slot, so that every decoding step has the
  same shapes and the same tensors: the model's code, unchanged, is called with a 4-D mask (and,
  for grouped-query attention, an ``sdpa`` that does not copy the cache per query head).
- ``graphs``: ``static`` with the decoding step, sampling included, captured once per request as a
  CUDA graph and replayed for every token: one launch a token, and nothing read back but a look
  every ``CHECK_EVERY`` steps at whether every row has finished.

``auto`` picks ``graphs`` on CUDA and ``dynamic`` elsewhere; a model whose layers the static cache
does not fit (sliding windows, other attention kernels) falls back to ``dynamic``.

A LoRA adapter is decoded either ``separate`` (every adapted layer computes its base product and
the adapter's two low-rank products, three products and an add where the model has one) or
``merged``: for the request, each adapted layer's weight becomes base + adapter (peft's merge) and
the layer runs one product; the base weights are copied first and put back bit for bit after,
so training, the reference policy (the adapter switched off) and checkpoints never see the merge.
``auto`` merges on CUDA, where the adapter's small products are most of a decoding step's kernels
(a 1.5B policy with rank 16 sampled 2.3x slower than the same policy fully fine-tuned,
docs/bench/2026-12-02-gpu-session25), and keeps it separate on the CPU. Merged, the weights are
rounded once more in their dtype: in float32 the two give the same tokens and log-probabilities
within 1e-5 (python/cudal1_model/tests/test_decoders.py).
"""

import contextlib
import inspect

import torch

DECODERS = ("auto", "dynamic", "static", "graphs")
ADAPTERS = ("auto", "merged", "separate")

# How many decoding steps go by between looks at whether every row has finished (each look
# waits for the device).
CHECK_EVERY = 8


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = sorted_probs.cumsum(-1) - sorted_probs < top_p
    sorted_probs = sorted_probs * keep
    out = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return out / out.sum(-1, keepdim=True)


def sample(loaded, prompt_ids, n: int, temperature: float, top_p: float, max_tokens: int, seed,
           decoder: str = "auto"):
    """``n`` completions of one prompt: [{ids, logprobs, finish_reason}]."""
    groups, _ = generate(loaded, [prompt_ids], n, temperature, top_p, max_tokens, [seed], decoder)
    return groups[0]


def sample_many(loaded, prompts, n: int, temperature: float, top_p: float, max_tokens: int, seeds,
                decoder: str = "auto"):
    """``n`` completions of each prompt, decoded together in one batch: a list per prompt of
    [{ids, logprobs, finish_reason}] (see ``generate``)."""
    return generate(loaded, prompts, n, temperature, top_p, max_tokens, seeds, decoder)[0]


def generate(loaded, prompts, n: int, temperature: float, top_p: float, max_tokens: int, seeds,
             decoder: str = "auto", adapter: str = "auto"):
    """(groups, info): ``n`` completions of each prompt, decoded together in one batch
    (left-padded, with the attention mask and positions of each row's own tokens), a list per
    prompt of [{ids, logprobs, finish_reason}]. Each prompt draws from its own generator seeded
    with its seed, so its random draws do not depend on the other prompts of the batch (the
    numbers may differ in the last bits with the padding). Nothing waits for the device per
    token: tokens, log-probabilities and finished rows stay on it. ``info``: ``decoder``, the
    decoder used, ``fallback``, why it is not the one asked for (when it is not), and, with a LoRA
    adapter, ``adapter``: how it was decoded (``merged`` or ``separate``)."""
    used = resolve_decoder(loaded, decoder)
    info = {"decoder": used}
    merge = resolve_adapter(loaded, adapter) == "merged"
    if loaded.lora:
        info["adapter"] = "merged" if merge else "separate"
    rows = [list(p) for p in prompts for _ in range(n)]
    batch = _Batch(loaded, rows, n, seeds, temperature, top_p, max_tokens)
    with torch.no_grad(), (merged_adapter(loaded) if merge else contextlib.nullcontext()):
        if used == "dynamic":
            _decode_dynamic(loaded, batch)
        else:
            try:
                _decode_static(loaded, batch, graphs=used == "graphs")
            except _CaptureFailed as exc:
                # The model's step could not be captured: the same cache and masks, without the
                # graph (every draw is made again from the seeds).
                info["decoder"] = "static"
                info["fallback"] = f"the decoding step could not be captured as a CUDA graph: {exc}"
                batch = _Batch(loaded, rows, n, seeds, temperature, top_p, max_tokens)
                _decode_static(loaded, batch, graphs=False)
    return batch.results(loaded, len(prompts)), info


def resolve_decoder(loaded, decoder: str) -> str:
    """The decoder that ``decoder`` names for this model and device (``auto``'s choice)."""
    if decoder not in DECODERS:
        raise ValueError(f"unknown decoder {decoder!r}: use one of {', '.join(DECODERS)}")
    cuda = loaded.device.type == "cuda"
    if decoder == "dynamic":
        return "dynamic"
    unfit = static_unfit(loaded.model)
    if decoder == "auto":
        return "graphs" if cuda and unfit is None else "dynamic"
    if unfit is not None:
        raise ValueError(f"the `{decoder}` decoder does not fit this model ({unfit}): use `dynamic`")
    if decoder == "graphs" and not cuda:
        raise ValueError("the `graphs` decoder needs a CUDA device: use `static` or `dynamic`")
    return decoder


def resolve_adapter(loaded, adapter: str) -> str:
    """How ``adapter`` decodes this model's LoRA adapter (``auto``: merged on CUDA); ``separate``
    for a model without one."""
    if adapter not in ADAPTERS:
        raise ValueError(f"unknown adapter mode {adapter!r}: use one of {', '.join(ADAPTERS)}")
    if not loaded.lora:
        return "separate"
    if adapter == "auto":
        return "merged" if loaded.device.type == "cuda" else "separate"
    return adapter


@contextlib.contextmanager
def merged_adapter(loaded):
    """The active LoRA adapter merged into each adapted layer's base weight for the block; every
    base weight is copied first and put back after, bit for bit, whatever the block raised."""
    from peft.tuners.lora import LoraLayer

    layers = [m for m in loaded.model.modules() if isinstance(m, LoraLayer) and not m.merged]
    kept = [(m, m.get_base_layer().weight.detach().clone()) for m in layers]
    try:
        with torch.no_grad():
            for m, _ in kept:
                m.merge()
        yield
    finally:
        with torch.no_grad():
            for m, weight in kept:
                m.get_base_layer().weight.copy_(weight)
                m.merged_adapters.clear()


# Rows decoded together by default: on the CPU, and the most on a GPU (where the KV cache of the
# rows must also fit a quarter of the free memory; see `batch_rows`).
CPU_ROWS, GPU_ROWS = 64, 256


def batch_rows(loaded, width: int, max_tokens: int) -> int:
    """How many rows to decode together when the request does not say: ``CPU_ROWS`` on the CPU; on
    CUDA, up to ``GPU_ROWS`` while their cache of ``width + max_tokens`` tokens, the prompt pass's
    mask (``width`` squared), their logits and the sampling's copies of them take at most a
    quarter of the device's free memory."""
    if loaded.device.type != "cuda":
        return CPU_ROWS
    config = _base(loaded.model).config
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    heads = int(getattr(config, "num_attention_heads", 1) or 1)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = getattr(config, "head_dim", None) or int(getattr(config, "hidden_size", 0) or 0) // heads
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    size = loaded.model.get_input_embeddings().weight.element_size()
    per_row = (2 * layers * kv_heads * int(head_dim) * size * (width + max_tokens)
               + (size + 1) * width * width + 5 * 4 * vocab)
    free, _ = torch.cuda.mem_get_info(loaded.device)
    return max(1, min(GPU_ROWS, free // 4 // max(per_row, 1)))


def _base(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def static_unfit(model):
    """Why the static cache does not fit ``model`` (None when it does): it needs attention that
    takes a 4-D additive mask (transformers' ``sdpa`` or ``eager``) and full attention in every
    layer."""
    config = getattr(_base(model), "config", None)
    if config is None:
        return "no model config"
    impl = getattr(config, "_attn_implementation", None)
    if impl not in ("sdpa", "eager"):
        return f"attention implementation {impl!r}"
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        return f"layer types {sorted(kinds)}"
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return "a sliding window"
    return None


def _cache_keyword(model) -> str:
    """transformers 5.2x calls the cache argument `cache`, earlier versions `past_key_values`."""
    params = inspect.signature(_base(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class _Batch:
    """The rows of one decoding batch, what they drew, and the state a decoding step reads and
    advances on the device (the last token, the column it goes to, which rows have finished)."""

    def __init__(self, loaded, rows, n, seeds, temperature, top_p, max_tokens):
        device = loaded.device
        self.n, self.temperature, self.top_p, self.max_tokens = n, temperature, top_p, max_tokens
        self.generators = []
        for seed in seeds:
            g = torch.Generator(device=device)
            g.manual_seed(int(seed) if seed is not None else int(torch.seed() % (1 << 63)))
            self.generators.append(g)
        width = max(len(r) for r in rows)
        self.rows, self.width = len(rows), width
        ids = torch.full((len(rows), width), loaded.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
        self.ids, self.mask = ids.to(device), mask.to(device)
        self.positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        self.pad = torch.full((len(rows),), loaded.pad_id, dtype=torch.long, device=device)
        self.eos = torch.tensor(sorted(loaded.eos_ids), dtype=torch.long, device=device)
        self.tokens = torch.full((len(rows), max_tokens), loaded.pad_id, dtype=torch.long, device=device)
        self.logprobs = torch.zeros((len(rows), max_tokens), dtype=torch.float32, device=device)
        self.done = torch.zeros(len(rows), dtype=torch.bool, device=device)
        self.token = torch.zeros((len(rows), 1), dtype=torch.long, device=device)
        self.column = torch.zeros(1, dtype=torch.long, device=device)
        self.steps = 0

    def draw(self, logits) -> None:
        """Draws every row's next token from its last logits, on the device alone (a captured
        step replays it): the token goes to ``self.column`` of the tokens and into ``self.token``.

        Sampling is the exponential race, ``argmax(p / E)`` with ``E ~ Exp(1)`` drawn from each
        prompt's generator, which picks token ``i`` with probability ``p_i``; ``E = -log U`` with
        ``U`` uniform in [0, 1) is never 0, so no token is favoured where ``U`` rounds."""
        t = self.temperature
        logp = torch.log_softmax(logits.float() / (t if t > 0 else 1.0), dim=-1)
        if t > 0:
            probs = _top_p(logp.exp(), self.top_p)
            u = torch.empty_like(probs)
            n = self.n
            for k, g in enumerate(self.generators):
                u[k * n:(k + 1) * n].uniform_(generator=g)
            choice = (probs / u.log_().neg_()).argmax(-1)
        else:
            choice = logp.argmax(-1)
        choice = torch.where(self.done, self.pad, choice)
        self.tokens.index_copy_(1, self.column, choice.unsqueeze(1))
        self.logprobs.index_copy_(1, self.column, logp.gather(1, choice.unsqueeze(1)))
        self.done.logical_or_((choice.unsqueeze(1) == self.eos.unsqueeze(0)).any(1))
        self.token.copy_(choice.unsqueeze(1))
        self.column.add_(1)

    def run(self, logits, advance) -> None:
        """Draws the first token from the prompt pass's ``logits``, then calls ``advance`` (a
        decoding step: the model on ``self.token``, then ``draw``) until ``max_tokens`` or until
        every row has finished, looked at every CHECK_EVERY steps (a look waits for the device)."""
        self.draw(logits)
        self.steps = 1
        while self.steps < self.max_tokens:
            if self.steps % CHECK_EVERY == 0 and bool(self.done.all()):
                break
            advance()
            self.steps += 1

    def results(self, loaded, prompts):
        tokens = self.tokens[:, :self.steps].tolist()
        logprobs = self.logprobs[:, :self.steps].tolist()
        eos = loaded.eos_ids
        out = []
        for i in range(self.rows):
            row = tokens[i]
            end = next((j + 1 for j, t in enumerate(row) if t in eos), len(row))
            stop = bool(row[:end]) and row[end - 1] in eos
            out.append({"ids": row[:end], "logprobs": logprobs[i][:end],
                        "finish_reason": "stop" if stop else "length"})
        return [out[k * self.n:(k + 1) * self.n] for k in range(prompts)]


def _decode_dynamic(loaded, b: _Batch) -> None:
    model, device = loaded.model, loaded.device
    # Only the last position's logits: rows x width x vocabulary would not fit for long prompts.
    out = model(input_ids=b.ids, attention_mask=b.mask, position_ids=b.positions, use_cache=True,
                logits_to_keep=1)
    state = {"past": out.past_key_values, "mask": b.mask, "last": b.positions[:, -1:]}
    ones = torch.ones((b.rows, 1), dtype=b.mask.dtype, device=device)

    def advance():
        state["mask"] = torch.cat([state["mask"], ones], dim=1)
        state["last"] = state["last"] + 1
        out = model(input_ids=b.token, attention_mask=state["mask"], position_ids=state["last"],
                    past_key_values=state["past"], use_cache=True)
        state["past"] = out.past_key_values
        b.draw(out.logits[:, -1, :])

    b.run(out.logits[:, -1, :], advance)


class StaticKV:
    """A key/value cache of fixed length, written in place at the slots of ``write`` (a tensor on
    the device, so that a captured step writes where the step's slot is when it is replayed).
    It answers what the model's attention asks of a cache (``update``); the attention mask is
    ours (4-D), so transformers asks it nothing else."""

    is_compileable = True

    def __init__(self, length: int) -> None:
        self.length = length
        self.write = None
        # How many slots ``update`` hands back (all of them when None): the prompt pass needs
        # only the prompt's, so that its mask is width x width rather than width x length.
        self.visible = None
        self.keys, self.values = {}, {}
        self.updates = 0

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if layer_idx not in self.keys:
            b, h, _, d = key_states.shape
            self.keys[layer_idx] = key_states.new_zeros((b, h, self.length, d))
            self.values[layer_idx] = value_states.new_zeros((b, h, self.length, value_states.shape[-1]))
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        keys.index_copy_(2, self.write, key_states)
        values.index_copy_(2, self.write, value_states)
        self.updates += 1
        if self.visible is not None:
            return keys[:, :, :self.visible], values[:, :, :self.visible]
        return keys, values

    def get_seq_length(self, layer_idx=0) -> int:
        return 0


def _packed_gqa(original):
    """transformers' ``sdpa`` attention for our 4-D additive masks, without copying the cache
    for grouped-query attention: the query heads that share a key/value head are laid side by
    side as extra query rows of that head (transformers' own ``sdpa`` repeats every key and value
    per query head when there is a mask, a copy of the whole cache per layer and step). Any
    other call goes to ``original``."""

    def attend(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
               **kwargs):
        plain = not any(kwargs.get(k) is not None for k in ("s_aux", "softcap", "sliding_window"))
        b, heads, q, _ = query.shape
        kv_heads, length = key.shape[1], key.shape[2]
        if (not plain or attention_mask is None or attention_mask.dim() != 4
                or attention_mask.dtype == torch.bool or heads % kv_heads or key.shape[0] != b):
            return original(module, query, key, value, attention_mask, dropout=dropout,
                            scaling=scaling, is_causal=is_causal, **kwargs)
        rep = heads // kv_heads
        mask = attention_mask[:, :, :, :length]
        if rep > 1:
            # Row r * q + t of a key/value head is query head (head * rep + r) at position t.
            query = query.reshape(b, kv_heads, rep * q, query.shape[-1])
            if q == 1:
                mask = mask.expand(mask.shape[0], mask.shape[1], rep, length)
            else:
                mask = mask.repeat(1, 1, rep, 1)
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, dropout_p=0.0, scale=scaling)
        out = out.reshape(b, heads, q, value.shape[-1]).transpose(1, 2).contiguous()
        return out, None

    return attend


class _PackedAttention:
    """While in use, transformers' ``sdpa`` attention is ``_packed_gqa`` of it (only for the
    static decoder's own calls: the worker serves one request at a time)."""

    def __enter__(self):
        try:
            from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        except ImportError:
            self.table = None
            return self
        self.table = ALL_ATTENTION_FUNCTIONS
        self.had = "sdpa" in getattr(self.table, "_local_mapping", {})
        self.before = self.table["sdpa"]
        self.table["sdpa"] = _packed_gqa(self.before)
        return self

    def __exit__(self, *exc):
        if self.table is None:
            return False
        if self.had:
            self.table["sdpa"] = self.before
        else:
            del self.table["sdpa"]
        return False


class _CaptureFailed(Exception):
    pass


def _decode_static(loaded, b: _Batch, graphs: bool) -> None:
    with _PackedAttention():
        _decode_static_inner(loaded, b, graphs)


def _decode_static_inner(loaded, b: _Batch, graphs: bool) -> None:
    model, device = loaded.model, loaded.device
    dtype = model.get_input_embeddings().weight.dtype
    lowest = torch.finfo(dtype).min
    length = b.width + b.max_tokens
    cache = StaticKV(length)
    keyword = _cache_keyword(model)
    # Which key slots each row may ever see: its prompt's tokens (not the left padding) and every
    # generated slot; causality (slot <= the query's slot) is added per pass.
    valid = torch.ones((b.rows, length), dtype=torch.bool, device=device)
    valid[:, :b.width] = b.mask.bool()
    slots = torch.arange(length, device=device)

    # The prompt pass. A padding query may see itself, so that no row of the mask is empty (an
    # empty row is NaN, and NaN values in the cache would reach real rows through 0 * NaN).
    query = slots[:b.width]
    see = (query[None, :] <= query[:, None])[None] & valid[:, None, :b.width]
    see = see | (query[None, :] == query[:, None])[None]
    prefill_mask = torch.zeros(see.shape, dtype=dtype, device=device).masked_fill(~see, lowest)
    cache.write, cache.visible = query, b.width
    out = model(input_ids=b.ids, attention_mask=prefill_mask[:, None], position_ids=b.positions,
                use_cache=True, logits_to_keep=1, **{keyword: cache})
    layers = len(cache.keys)
    if layers == 0 or cache.updates != layers:
        raise RuntimeError(f"the model's attention did not use the static cache as expected "
                           f"({cache.updates} updates of {layers} layers): use the `dynamic` decoder")
    first_logits = out.logits[:, -1, :]
    del out, prefill_mask, see

    # The decoding step's inputs, at fixed addresses: the token (b.token), positions and slot.
    position = b.positions[:, -1:] + 1
    write = torch.full((1,), b.width, dtype=torch.long, device=device)
    cache.write, cache.visible = write, None

    def forward():
        see = valid & (slots <= write)
        mask = torch.zeros((b.rows, 1, 1, length), dtype=dtype, device=device)
        mask.masked_fill_(~see[:, None, None, :], lowest)
        logits = model(input_ids=b.token, attention_mask=mask, position_ids=position,
                       use_cache=True, **{keyword: cache}).logits[:, -1, :]
        position.add_(1)
        write.add_(1)
        return logits

    def advance():
        b.draw(forward())

    if graphs:
        try:
            advance = _capture(b, forward, [position, write])
        except Exception as exc:  # noqa: BLE001 - any failure of capture falls back to eager
            raise _CaptureFailed(f"{type(exc).__name__}: {exc}") from exc
    b.run(first_logits, advance)


def _capture(b: _Batch, forward, state):
    """The decoding step captured as a CUDA graph: a function that replays it. With generators
    that a graph can advance (``register_generator_state``, torch 2.5 and later) the step's
    sampling is in the graph too, and a token costs one launch; otherwise the graph holds the
    model and ``draw`` runs from Python. Two warm-up steps run first on a side stream, then what
    they advanced (the step's inputs, the batch's state and its generators) is put back."""
    tensors = [b.token, b.column, b.done, *state]
    saved = [t.clone() for t in tensors]
    generators = [g.get_state() for g in b.generators]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            b.draw(forward())
    torch.cuda.current_stream().wait_stream(side)
    for t, v in zip(tensors, saved):
        t.copy_(v)
    for g, v in zip(b.generators, generators):
        g.set_state(v)
    graph = torch.cuda.CUDAGraph()
    if hasattr(graph, "register_generator_state"):
        for g in b.generators:
            graph.register_generator_state(g)
        with torch.cuda.graph(graph):
            b.draw(forward())
        return graph.replay
    with torch.cuda.graph(graph):
        logits = forward()

    def replay():
        graph.replay()
        b.draw(logits)

    return replay
