"""Sampling completions with their token ids and log-probabilities.

The log-probability of each sampled token is taken from the full distribution at the sampling
temperature, ``log_softmax(logits / T)``, so that ``losses.token_logprobs`` recomputes it (top-p
only narrows what can be drawn; with ``top_p = 1`` they are the exact sampling probabilities).
``T = 0`` is greedy, with log-probabilities at ``T = 1``.
"""

import torch


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = sorted_probs.cumsum(-1) - sorted_probs < top_p
    sorted_probs = sorted_probs * keep
    out = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return out / out.sum(-1, keepdim=True)


def sample(loaded, prompt_ids, n: int, temperature: float, top_p: float, max_tokens: int, seed):
    """``n`` completions of one prompt: [{ids, logprobs, finish_reason}]."""
    return sample_many(loaded, [prompt_ids], n, temperature, top_p, max_tokens, [seed])[0]


# How many decoding steps go by between looks at whether every row has finished (each look
# waits for the device).
CHECK_EVERY = 8


def sample_many(loaded, prompts, n: int, temperature: float, top_p: float, max_tokens: int, seeds):
    """``n`` completions of each prompt, decoded together in one batch (left-padded, with the
    attention mask and positions of each row's own tokens): a list per prompt of
    [{ids, logprobs, finish_reason}]. Each prompt draws from its own generator seeded with its
    seed, so its random draws do not depend on the other prompts of the batch (the numbers may
    differ in the last bits with the padding). Nothing waits for the device per token: tokens,
    log-probabilities and finished rows stay on it."""
    model, device = loaded.model, loaded.device
    generators = []
    for seed in seeds:
        g = torch.Generator(device=device)
        g.manual_seed(int(seed) if seed is not None else int(torch.seed() % (1 << 63)))
        generators.append(g)
    rows = [list(p) for p in prompts for _ in range(n)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), loaded.pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long, device=device)
        mask[i, width - len(r):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    eos = torch.tensor(sorted(loaded.eos_ids), dtype=torch.long, device=device)
    tokens = torch.full((len(rows), max_tokens), loaded.pad_id, dtype=torch.long, device=device)
    logprobs = torch.zeros((len(rows), max_tokens), dtype=torch.float32, device=device)
    done = torch.zeros(len(rows), dtype=torch.bool, device=device)
    steps = 0
    with torch.no_grad():
        # Only the last position's logits: rows x width x vocabulary would not fit for long prompts.
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        past, logits = out.past_key_values, out.logits[:, -1, :]
        last = positions[:, -1]
        for step in range(max_tokens):
            scaled = logits.float() / (temperature if temperature > 0 else 1.0)
            logp = torch.log_softmax(scaled, dim=-1)
            if temperature > 0:
                probs = _top_p(logp.exp(), top_p)
                choice = torch.cat([torch.multinomial(probs[k * n:(k + 1) * n], 1, generator=g).squeeze(1) for k, g in enumerate(generators)])
            else:
                choice = logp.argmax(-1)
            choice = torch.where(done, torch.full_like(choice, loaded.pad_id), choice)
            tokens[:, step] = choice
            logprobs[:, step] = logp.gather(1, choice.unsqueeze(1)).squeeze(1)
            steps = step + 1
            done = done | torch.isin(choice, eos)
            if steps % CHECK_EVERY == 0 and bool(done.all()):
                break
            if steps == max_tokens:
                break
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=device)], dim=1)
            last = last + 1
            out = model(input_ids=choice.unsqueeze(1), attention_mask=mask, position_ids=last.unsqueeze(1), past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1, :]
    tokens, logprobs = tokens[:, :steps].tolist(), logprobs[:, :steps].tolist()
    results = []
    for i in range(len(rows)):
        row = tokens[i]
        end = next((j + 1 for j, t in enumerate(row) if t in loaded.eos_ids), len(row))
        results.append({"ids": row[:end], "logprobs": logprobs[i][:end], "finish_reason": "stop" if row[:end] and row[end - 1] in loaded.eos_ids else "length"})
    return [results[k * n:(k + 1) * n] for k in range(len(prompts))]
