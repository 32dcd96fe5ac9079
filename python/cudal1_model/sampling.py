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
    model, device = loaded.model, loaded.device
    generator = torch.Generator(device=device)
    generator.manual_seed(int(seed) if seed is not None else int(torch.seed() % (1 << 63)))
    ids = torch.tensor([list(prompt_ids)] * n, dtype=torch.long, device=device)
    tokens = [[] for _ in range(n)]
    logprobs = [[] for _ in range(n)]
    done = [False] * n
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1, :]
        for _ in range(max_tokens):
            scaled = logits.float() / (temperature if temperature > 0 else 1.0)
            logp = torch.log_softmax(scaled, dim=-1)
            if temperature > 0:
                choice = torch.multinomial(_top_p(logp.exp(), top_p), 1, generator=generator).squeeze(1)
            else:
                choice = logp.argmax(-1)
            for i in range(n):
                if not done[i]:
                    t = int(choice[i])
                    tokens[i].append(t)
                    logprobs[i].append(float(logp[i, t]))
                    if t in loaded.eos_ids:
                        done[i] = True
            if all(done):
                break
            out = model(input_ids=choice.unsqueeze(1), past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1, :]
    return [
        {"ids": tokens[i], "logprobs": logprobs[i], "finish_reason": "stop" if tokens[i] and tokens[i][-1] in loaded.eos_ids else "length"}
        for i in range(n)
    ]
