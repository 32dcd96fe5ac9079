"""Per-token log-probabilities and the losses of a training step, as pure functions of tensors.

A sequence is a prompt and a completion (token ids). Only completion tokens are scored. Sequences
of a batch are padded on the right; padding never reaches a score or a gradient. Losses are sums
of per-token terms with per-token weights that depend on the whole batch, never on how it was cut
into micro-batches, so micro-batching changes nothing but memory:

- ``token_mean``: every completion token of the batch weighs ``1 / tokens in the batch``;
- ``sequence_mean``: each sequence's tokens weigh ``1 / (sequences * its length)``;
- ``fixed``: every token weighs ``1 / normalizer`` (a constant, as in Dr. GRPO).

The policy-gradient term is PPO's clipped surrogate, ``-min(r A, clip(r, 1 - eps_low, 1 + eps_high)
A)`` with ``r = exp(logp - logp_old)``; the KL penalty is the ``k3`` estimator
``exp(ref - logp) - (ref - logp) - 1`` (unbiased, non-negative), times ``kl_coef``.
"""

import torch

AGGREGATIONS = ("token_mean", "sequence_mean", "fixed")


def batch(sequences, pad_id: int, device):
    """(input_ids, attention_mask, position_ids, [(start, length)]) of right-padded sequences; a
    completion's tokens are predicted by the logits at ``start - 1 .. start + length - 2``."""
    lengths = [len(s["prompt_ids"]) + len(s["completion_ids"]) for s in sequences]
    width = max(lengths)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    spans = []
    for i, s in enumerate(sequences):
        row = list(s["prompt_ids"]) + list(s["completion_ids"])
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
        spans.append((len(s["prompt_ids"]), len(s["completion_ids"])))
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device), spans


def token_logprobs(model, sequences, temperature: float, pad_id: int, device, entropies=None):
    """Log-probabilities of each completion token under ``model`` at ``temperature`` (the
    distribution the tokens were sampled from), one 1-D tensor per sequence, with gradients when
    they are enabled. When ``entropies`` is a list, each sequence's summed entropy (nats, no
    gradient) is appended to it."""
    ids, mask, positions, spans = batch(sequences, pad_id, device)
    # Only the positions from the earliest completion's on go through the output head: the
    # prompts' logits (rows x prompt x vocabulary, most of a step's memory with a large
    # vocabulary) are never needed. `logits_to_keep` keeps the last `keep` positions.
    width = ids.shape[1]
    keep = width - (min(start for start, _ in spans) - 1)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
    offset = width - logits.shape[1]
    out = []
    for i, (start, length) in enumerate(spans):
        rows = logits[i, start - 1 - offset : start - 1 - offset + length].float()
        if temperature > 0:
            rows = rows / temperature
        logp = torch.log_softmax(rows, dim=-1)
        out.append(logp.gather(1, ids[i, start : start + length].unsqueeze(1)).squeeze(1))
        if entropies is not None:
            with torch.no_grad():
                entropies.append(float(-(logp.exp() * logp).sum()))
    return out


def weights(lengths, aggregation: str, normalizer=None):
    """The per-token weight of each sequence under ``aggregation``."""
    if aggregation == "token_mean":
        tokens = sum(lengths)
        return [1.0 / tokens if tokens else 0.0 for _ in lengths]
    if aggregation == "sequence_mean":
        return [1.0 / (len(lengths) * n) if n else 0.0 for n in lengths]
    if aggregation == "fixed":
        if not normalizer or normalizer <= 0:
            raise ValueError("the `fixed` aggregation needs a positive `normalizer`")
        return [1.0 / normalizer for _ in lengths]
    raise ValueError(f"unknown aggregation {aggregation!r}: use one of {', '.join(AGGREGATIONS)}")


def sequence_terms(logp, seq: dict, kind: str, clip_low: float, clip_high: float, kl_coef: float):
    """Per-token loss terms of one sequence and its statistics: (terms, clipped, kl)."""
    if kind == "sft":
        return -logp, torch.zeros_like(logp, dtype=torch.bool), torch.zeros_like(logp)
    advantage = float(seq["advantage"])
    old = torch.tensor(seq["old_logprobs"], dtype=logp.dtype, device=logp.device)
    ratio = torch.exp(logp - old)
    unclipped = ratio * advantage
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantage
    terms = -torch.minimum(unclipped, clipped)
    # Where the clipped branch is the smaller one, the token gets no gradient.
    was_clipped = clipped < unclipped
    kl = torch.zeros_like(logp)
    if kl_coef > 0:
        ref = torch.tensor(seq["ref_logprobs"], dtype=logp.dtype, device=logp.device)
        d = ref - logp
        kl = torch.exp(d) - d - 1.0
        terms = terms + kl_coef * kl
    return terms, was_clipped, kl
