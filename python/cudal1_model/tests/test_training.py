"""The training math of the model worker on a tiny random model, in process: each property of
the issue's list (advantages move log-probabilities the right way, zero signal changes nothing,
sampled log-probabilities are recomputable, the clip, the KL pull, the aggregations, padding,
checkpoints), each able to fail."""

import copy
import math

import pytest
import torch

from cudal1_model.losses import sequence_terms, token_logprobs, weights
from cudal1_model.session import Session

PROMPT = [{"role": "user", "content": "Write ModelNew."}]


def session(tiny_dir, lr=5e-3, reference=False, lora=None, dtype="float32"):
    s = Session()
    reply = call(s, "load", model={"hf": tiny_dir}, optimizer={"lr": lr}, reference=reference, lora=lora, seed=0, dtype=dtype)
    assert reply["trainable"] > 0
    return s


def call(s, op, **fields):
    import json

    reply, _ = s.serve(json.dumps({"id": 1, "op": op, **fields}))
    assert reply["ok"], reply
    return reply


def sampled(s, n=4, temperature=1.0, max_tokens=12, seed=3):
    prompt = call(s, "encode", messages=PROMPT)["prompt_ids"]
    samples = call(s, "generate", prompts=[prompt], n=n, temperature=temperature, max_tokens=max_tokens, seed=seed)["samples"]
    return prompt, samples


def logprob_sum(s, prompt, ids, temperature=1.0, policy="policy"):
    lp = call(s, "logprobs", sequences=[{"prompt_ids": prompt, "completion_ids": ids}], temperature=temperature, policy=policy)["logprobs"][0]
    return sum(lp)


def pg_step(s, prompt, sample, advantage, **extra):
    seq = {"prompt_ids": prompt, "completion_ids": sample["ids"], "advantage": advantage, "old_logprobs": sample["logprobs"]}
    return call(s, "train_step", kind="pg", sequences=[seq], **extra)


def test_a_positive_advantage_raises_the_sampled_sequences_logprob_and_a_negative_one_lowers_it(tiny_dir):
    for sign in (1.0, -1.0):
        s = session(tiny_dir)
        prompt, (sample, *_) = sampled(s)
        before = logprob_sum(s, prompt, sample["ids"])
        for _ in range(3):
            pg_step(s, prompt, sample, sign, clip_low=0.99, clip_high=10.0)
        after = logprob_sum(s, prompt, sample["ids"])
        assert (after - before) * sign > 0.5, (sign, before, after)


def test_zero_advantage_and_zero_kl_leave_the_weights_unchanged(tiny_dir):
    s = session(tiny_dir)
    before = copy.deepcopy(s.loaded.model.state_dict())
    prompt, samples = sampled(s)
    reply = pg_step(s, prompt, samples[0], 0.0)
    assert reply["grad_norm"] == 0.0
    after = s.loaded.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_logprobs_generate_returns_equal_recomputed_ones_at_the_sampling_temperature(tiny_dir, temperature):
    s = session(tiny_dir)
    prompt, samples = sampled(s, n=3, temperature=temperature, max_tokens=16)
    seqs = [{"prompt_ids": prompt, "completion_ids": x["ids"]} for x in samples]
    again = call(s, "logprobs", sequences=seqs, temperature=temperature)["logprobs"]
    for x, y in zip(samples, again):
        assert len(x["logprobs"]) == len(y) > 0
        assert max(abs(a - b) for a, b in zip(x["logprobs"], y)) < 1e-4
    # Another temperature gives other numbers: the check above can fail.
    other = call(s, "logprobs", sequences=seqs[:1], temperature=temperature * 2)["logprobs"][0]
    assert max(abs(a - b) for a, b in zip(samples[0]["logprobs"], other)) > 1e-3


def flat(nested):
    return [x for row in nested for x in row]


def grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]) if any(p.grad is not None for p in model.parameters()) else torch.zeros(1)


def test_the_clip_zeroes_gradients_where_it_should(tiny_dir):
    s = session(tiny_dir)
    loaded = s.loaded
    prompt, (sample, *_) = sampled(s)
    seq = {"prompt_ids": prompt, "completion_ids": sample["ids"]}

    def grad_norm(advantage, ratio):
        loaded.model.zero_grad(set_to_none=True)
        (lp,) = token_logprobs(loaded.model, [seq], 1.0, loaded.pad_id, loaded.device)
        old = (lp.detach() - math.log(ratio)).tolist()
        terms, clipped, _ = sequence_terms(lp, {**seq, "advantage": advantage, "old_logprobs": old}, "pg", 0.2, 0.2, 0.0)
        terms.sum().backward()
        return float(grads(loaded.model).norm()), bool(clipped.all())

    # Ratio 1.5 is beyond 1 + 0.2: a positive advantage gets nothing more from it...
    assert grad_norm(1.0, 1.5) == (0.0, True)
    # ...a negative one still pushes it down, and inside the range both move.
    assert grad_norm(-1.0, 1.5)[0] > 0
    assert grad_norm(1.0, 1.1)[0] > 0
    # Ratio 0.5 is below 1 - 0.2: now the negative advantage is the clipped one.
    assert grad_norm(-1.0, 0.5) == (0.0, True)
    assert grad_norm(1.0, 0.5)[0] > 0


def test_the_kl_term_alone_pulls_the_policy_back_towards_the_reference(tiny_dir):
    s = session(tiny_dir, lr=1e-2, reference=True)
    prompt, samples = sampled(s, n=4)
    # Move the policy away from the reference with supervised steps on one reply.
    target = {"prompt_ids": prompt, "completion_ids": samples[0]["ids"]}
    for _ in range(5):
        call(s, "train_step", kind="sft", sequences=[target])
    seqs = [{"prompt_ids": prompt, "completion_ids": x["ids"]} for x in samples]

    def kl():
        pol = call(s, "logprobs", sequences=seqs)["logprobs"]
        ref = call(s, "logprobs", sequences=seqs, policy="reference")["logprobs"]
        return sum(math.exp(r - p) - (r - p) - 1 for ps, rs in zip(pol, ref) for p, r in zip(ps, rs)), pol, ref

    before, pol, ref = kl()
    assert before > 0.1
    batch = [{**q, "advantage": 0.0, "old_logprobs": p, "ref_logprobs": r} for q, p, r in zip(seqs, pol, ref)]
    for _ in range(5):
        call(s, "train_step", kind="pg", sequences=batch, kl_coef=1.0)
    after, _, _ = kl()
    assert after < 0.7 * before, (before, after)


def ragged(s):
    prompt, samples = sampled(s, n=3, max_tokens=12)
    seqs = []
    for i, x in enumerate(samples):
        ids = x["ids"][: 3 + 4 * i]  # 3, 7 and 11 tokens
        seqs.append({"prompt_ids": prompt, "completion_ids": ids, "advantage": [1.0, -0.5, 0.25][i], "old_logprobs": x["logprobs"][: len(ids)]})
    assert [len(q["completion_ids"]) for q in seqs] == [3, 7, 11]
    return seqs


def test_the_three_aggregations_match_their_closed_forms_on_ragged_lengths(tiny_dir):
    s = session(tiny_dir)
    loaded = s.loaded
    seqs = ragged(s)
    with torch.no_grad():
        lps = token_logprobs(loaded.model, seqs, 1.0, loaded.pad_id, loaded.device)
        terms = [sequence_terms(lp, q, "pg", 0.2, 0.2, 0.0)[0] for lp, q in zip(lps, seqs)]
    lengths = [len(t) for t in terms]

    def aggregated(kind, normalizer=None):
        w = weights(lengths, kind, normalizer)
        return sum(float((t * wi).sum()) for t, wi in zip(terms, w))

    flat = torch.cat(terms)
    assert aggregated("token_mean") == pytest.approx(float(flat.mean()), rel=1e-6)
    assert aggregated("sequence_mean") == pytest.approx(sum(float(t.mean()) for t in terms) / 3, rel=1e-6)
    assert aggregated("fixed", 64.0) == pytest.approx(float(flat.sum()) / 64.0, rel=1e-6)
    # The three differ on ragged lengths: the test can tell them apart.
    assert len({round(aggregated("token_mean"), 9), round(aggregated("sequence_mean"), 9), round(aggregated("fixed", 64.0), 9)}) == 3


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "fixed"])
def test_micro_batching_changes_neither_the_loss_nor_the_gradients(tiny_dir, aggregation):
    results = []
    for micro in (1, 2, 3):
        s = session(tiny_dir)
        seqs = ragged(s)
        reply = call(s, "train_step", kind="pg", sequences=seqs, aggregation=aggregation, normalizer=64.0, micro_batch=micro, max_grad_norm=None, apply=False)
        results.append((reply["loss"], grads(s.loaded.model).clone()))
    for loss, g in results[1:]:
        assert loss == pytest.approx(results[0][0], rel=1e-5, abs=1e-7)
        assert torch.allclose(g, results[0][1], atol=1e-7, rtol=1e-4), float((g - results[0][1]).abs().max())
    assert results[0][1].norm() > 0


def test_padding_does_not_change_gradients(tiny_dir):
    s = session(tiny_dir)
    loaded = s.loaded
    seqs = ragged(s)
    short, long_ = seqs[0], seqs[2]

    def grad_of_short(batch):
        loaded.model.zero_grad(set_to_none=True)
        lps = token_logprobs(loaded.model, batch, 1.0, loaded.pad_id, loaded.device)
        sequence_terms(lps[0], short, "pg", 0.2, 0.2, 0.0)[0].sum().backward()
        return grads(loaded.model).clone()

    alone = grad_of_short([short])
    padded = grad_of_short([short, long_])  # `short` is padded to the long one's length
    assert alone.norm() > 0
    assert torch.allclose(alone, padded, atol=1e-6), float((alone - padded).abs().max())


@pytest.mark.parametrize("lora,dtype", [(None, "float32"), ({"r": 4, "alpha": 8}, "float32"), (None, "bfloat16")])
def test_save_then_restore_reproduces_logprobs_and_the_next_step(tiny_dir, tmp_path, lora, dtype):
    s = session(tiny_dir, lora=lora, dtype=dtype)
    prompt, samples = sampled(s)
    seqs = [{"prompt_ids": prompt, "completion_ids": x["ids"], "advantage": a, "old_logprobs": x["logprobs"]} for x, a in zip(samples, [1.0, -1.0, 0.5, -0.5])]
    call(s, "train_step", kind="pg", sequences=seqs)
    saved = call(s, "save", dir=str(tmp_path / "ckpt"))
    assert saved["step"] == 1
    at_save = call(s, "logprobs", sequences=seqs)["logprobs"]
    step_from_saved = call(s, "train_step", kind="pg", sequences=seqs)
    after_one_more = call(s, "logprobs", sequences=seqs)["logprobs"]
    call(s, "train_step", kind="pg", sequences=seqs)

    fresh = session(tiny_dir, lora=lora, dtype=dtype)
    assert call(fresh, "restore", dir=str(tmp_path / "ckpt"))["step"] == 1
    assert flat(call(fresh, "logprobs", sequences=seqs)["logprobs"]) == pytest.approx(flat(at_save), abs=1e-6)
    # The optimizer's state came back too: the same next step lands on the same weights.
    again = call(fresh, "train_step", kind="pg", sequences=seqs)
    assert again["loss"] == pytest.approx(step_from_saved["loss"], rel=1e-6)
    assert flat(call(fresh, "logprobs", sequences=seqs)["logprobs"]) == pytest.approx(flat(after_one_more), abs=1e-5)


def test_bfloat16_weights_are_trained_through_float32_copies(tiny_dir, tmp_path):
    # An update far below bfloat16's precision: stepped on the weights themselves it would be
    # rounded away every time; the float32 copies keep it, and the weights follow them.
    s = session(tiny_dir, lr=1e-6, dtype="bfloat16")
    loaded = s.loaded
    assert all(m.dtype == torch.float32 for group in loaded.optimizer.param_groups for m in group["params"])
    start = [m.clone() for _, m in loaded.masters]
    prompt, samples = sampled(s)
    for _ in range(3):
        pg_step(s, prompt, samples[0], 1.0)
    moved = [(m - m0).abs().max().item() for (_, m), m0 in zip(loaded.masters, start)]
    assert max(moved) > 0, "the float32 copies took the updates"
    for p, m in loaded.masters:
        assert p.dtype == torch.bfloat16 and torch.equal(p, m.to(torch.bfloat16)), "each weight is its copy rounded"

    # A stage that starts from another's weights steps from them, not from its own old copies:
    # with no signal the step changes nothing.
    call(s, "save", dir=str(tmp_path / "trained"))
    trained = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    other = session(tiny_dir, lr=1e-3, dtype="bfloat16")
    call(other, "restore", dir=str(tmp_path / "trained"), weights_only=True)
    reply = pg_step(other, prompt, samples[0], 0.0)
    assert reply["grad_norm"] == 0.0
    after = other.loaded.model.state_dict()
    assert all(torch.equal(trained[k], after[k]) for k in trained), "the restored weights stay"


def test_a_checkpoint_half_written_leaves_the_previous_one_whole(tiny_dir, tmp_path):
    s = session(tiny_dir)
    target = tmp_path / "ckpt"
    call(s, "save", dir=str(target))
    # What a kill between the files and the rename leaves: a stray temporary directory.
    (tmp_path / "ckpt.tmp-99999").mkdir()
    (tmp_path / "ckpt.tmp-99999" / "weights.pt").write_bytes(b"partial")
    assert call(session(tiny_dir), "restore", dir=str(target))["step"] == 0
    import json

    broken = tmp_path / "broken"
    broken.mkdir()
    reply, _ = s.serve(json.dumps({"id": 2, "op": "restore", "dir": str(broken)}))
    assert not reply["ok"] and "not a complete checkpoint" in reply["error"]["message"]


def test_a_starting_point_needs_only_the_weights_and_the_state(tiny_dir, tmp_path):
    # What bench/gpu_ablation.sh brings back of a seed's self-supervised checkpoint, so that an
    # arm can start on another machine: the weights and state.json, not the optimizer's state.
    import json

    s = session(tiny_dir, lora={"r": 4, "alpha": 8})
    prompt, samples = sampled(s)
    pg_step(s, prompt, samples[0], 1.0)
    target = tmp_path / "ckpt"
    call(s, "save", dir=str(target))
    (target / "optimizer.pt").unlink()
    (target / "rng.pt").unlink()
    seqs = [{"prompt_ids": prompt, "completion_ids": samples[0]["ids"], "advantage": 0.0, "old_logprobs": samples[0]["logprobs"]}]
    trained = flat(call(s, "logprobs", sequences=seqs)["logprobs"])

    other = session(tiny_dir, lora={"r": 4, "alpha": 8})
    before = flat(call(other, "logprobs", sequences=seqs)["logprobs"])
    assert before != pytest.approx(trained, abs=1e-6), "the step moved the weights"
    call(other, "restore", dir=str(target), weights_only=True)
    assert flat(call(other, "logprobs", sequences=seqs)["logprobs"]) == pytest.approx(trained, abs=1e-6)
    # Resuming a run needs the whole checkpoint, and says what is missing.
    reply, _ = other.serve(json.dumps({"id": 3, "op": "restore", "dir": str(target)}))
    assert not reply["ok"] and "missing optimizer.pt, rng.pt" in reply["error"]["message"]


def test_prompts_decoded_together_give_what_each_gives_alone_and_recomputable_logprobs(tiny_dir):
    """Batched decoding pads prompts of different lengths on the left: the mask and positions
    must make each row what it would be alone, and the returned log-probabilities must be the
    ones training recomputes."""
    s = session(tiny_dir)
    short = call(s, "encode", messages=PROMPT)["prompt_ids"]
    long = call(s, "encode", messages=[{"role": "user", "content": "Write ModelNew, a faster Model, with a CUDA kernel for the whole forward pass."}])["prompt_ids"]
    assert len(long) > len(short) + 5
    together = call(s, "generate", prompts=[long, short], n=2, temperature=1.0, max_tokens=12, seed=7)["samples"]
    assert [x["prompt_index"] for x in together] == [0, 0, 1, 1]
    alone = call(s, "generate", prompts=[short], n=2, temperature=1.0, max_tokens=12, seed=8)["samples"]
    assert [x["ids"] for x in together[2:]] == [x["ids"] for x in alone]
    for x, y in zip(together[2:], alone):
        assert max(abs(a - b) for a, b in zip(x["logprobs"], y["logprobs"])) < 1e-4
    seqs = [{"prompt_ids": p, "completion_ids": x["ids"]} for p, x in zip([long, long, short, short], together)]
    again = call(s, "logprobs", sequences=seqs, temperature=1.0)["logprobs"]
    for x, y in zip(together, again):
        assert len(x["logprobs"]) == len(y) > 0
        assert max(abs(a - b) for a, b in zip(x["logprobs"], y)) < 1e-4
    # A batch smaller than the prompts' rows is split, with the same samples.
    split = call(s, "generate", prompts=[long, short], n=2, temperature=1.0, max_tokens=12, seed=7, batch_rows=2)["samples"]
    assert [x["ids"] for x in split] == [x["ids"] for x in together]


def test_sampling_scoring_and_training_replies_carry_the_peak_memory_of_their_op(tiny_dir):
    s = session(tiny_dir)
    prompt, samples = sampled(s)
    replies = {
        "generate": call(s, "generate", prompts=[prompt], n=2, max_tokens=4, seed=1),
        "logprobs": call(s, "logprobs", sequences=[{"prompt_ids": prompt, "completion_ids": samples[0]["ids"]}]),
        "train_step": pg_step(s, prompt, samples[0], 1.0),
    }
    for op, reply in replies.items():
        m = reply["memory"]
        # On the CPU: the worker's peak resident set, at least what torch and the model take.
        assert (m["device"], m["measure"]) == ("cpu", "process_rss"), (op, m)
        assert 50 << 20 < m["peak_bytes"] < 64 << 30, (op, m)
        assert m["reserved_bytes"] is None and m["held_bytes"] is None and m["total_bytes"] is None
    # Ops that compute nothing on the model carry none.
    assert "memory" not in call(s, "encode", messages=PROMPT)


def test_logprobs_from_the_completions_window_equal_those_of_every_positions_logits(tiny_dir):
    # Prompts of different lengths in one batch: only the positions from the earliest completion
    # on go through the output head, and each sequence still gets its own tokens' numbers.
    s = session(tiny_dir)
    loaded = s.loaded
    prompt, samples = sampled(s, n=2, max_tokens=8)
    seqs = [{"prompt_ids": prompt, "completion_ids": samples[0]["ids"][:5]},
            {"prompt_ids": prompt + samples[1]["ids"][:4], "completion_ids": samples[1]["ids"][4:8] or [3]},
            {"prompt_ids": prompt[:2], "completion_ids": prompt[2:6]}]
    with torch.no_grad():
        got = token_logprobs(loaded.model, seqs, 0.7, loaded.pad_id, loaded.device)
        for seq, lp in zip(seqs, got):
            row = torch.tensor([seq["prompt_ids"] + seq["completion_ids"]])
            logits = loaded.model(input_ids=row).logits[0].float() / 0.7
            start, n = len(seq["prompt_ids"]), len(seq["completion_ids"])
            full = torch.log_softmax(logits[start - 1 : start - 1 + n], -1).gather(1, row[0, start:].unsqueeze(1)).squeeze(1)
            assert lp.shape == full.shape
            assert torch.allclose(lp, full, atol=1e-5), (lp, full)
