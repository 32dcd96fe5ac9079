"""The static-cache decoder (and, on CUDA, its graph-captured step) against the dynamic one on a
tiny random model: the same tokens, the same log-probabilities, and log-probabilities that
training recomputes, for prompts of different lengths in one batch, with and without LoRA, with
rows that stop early."""

import json

import pytest
import torch

from cudal1_model.session import Session

SHORT = [{"role": "user", "content": "Write ModelNew."}]
LONG = [{"role": "user", "content": "Write ModelNew, a faster Model, with a CUDA kernel for the whole forward pass."}]


@pytest.fixture(scope="module", params=[4, 2], ids=["mha", "gqa"])
def tiny_dir(request, tmp_path_factory):
    """Tiny random models with 4 key/value heads and with 2 (grouped-query attention, which the
    static decoder's attention lays out differently)."""
    from cudal1_model import tiny

    return tiny.make(str(tmp_path_factory.mktemp("tiny") / "model"), kv_heads=request.param)


def serve(s, op, **fields):
    reply, _ = s.serve(json.dumps({"id": 1, "op": op, **fields}))
    return reply


def call(s, op, **fields):
    reply = serve(s, op, **fields)
    assert reply["ok"], reply
    return reply


def loaded(tiny_dir, lora=None, device="cpu"):
    s = Session()
    call(s, "load", model={"hf": tiny_dir}, optimizer={"lr": 1e-2}, lora=lora, seed=0, device=device)
    return s


def prompts(s):
    return [call(s, "encode", messages=m)["prompt_ids"] for m in (LONG, SHORT)]


def generate(s, ps, decoder, **extra):
    fields = dict(prompts=ps, n=3, temperature=0.8, top_p=0.95, max_tokens=24, seed=11)
    fields.update(extra)
    return call(s, "generate", decoder=decoder, **fields)


def same_samples(a, b, tol):
    assert [x["prompt_index"] for x in a] == [x["prompt_index"] for x in b]
    assert [x["ids"] for x in a] == [x["ids"] for x in b]
    assert [x["finish_reason"] for x in a] == [x["finish_reason"] for x in b]
    for x, y in zip(a, b):
        assert len(x["logprobs"]) == len(y["logprobs"]) == len(x["ids"]) > 0
        assert max(abs(p - q) for p, q in zip(x["logprobs"], y["logprobs"])) < tol


def recomputed(s, ps, samples, temperature):
    seqs = [{"prompt_ids": ps[x["prompt_index"]], "completion_ids": x["ids"]} for x in samples]
    return call(s, "logprobs", sequences=seqs, temperature=temperature)["logprobs"]


@pytest.mark.parametrize("lora", [None, {"r": 4, "alpha": 8}])
def test_the_static_cache_samples_what_the_dynamic_one_samples_with_recomputable_logprobs(tiny_dir, lora):
    s = loaded(tiny_dir, lora)
    if lora:
        # A trained adapter, so that the LoRA branch changes the function being decoded.
        for name, p in s.loaded.model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.5)
    ps = prompts(s)
    assert len(ps[0]) > len(ps[1]) + 5  # the short prompt is left-padded
    dynamic = generate(s, ps, "dynamic")
    static = generate(s, ps, "static")
    assert dynamic["decoder"] == "dynamic" and static["decoder"] == "static"
    assert "fallback" not in static
    same_samples(dynamic["samples"], static["samples"], 1e-5)
    for x, again in zip(static["samples"], recomputed(s, ps, static["samples"], 0.8)):
        assert max(abs(a - b) for a, b in zip(x["logprobs"], again)) < 1e-4
    # The check can fail: another seed draws other tokens.
    other = generate(s, ps, "static", seed=12)
    assert [x["ids"] for x in other["samples"]] != [x["ids"] for x in static["samples"]]


def trained_adapter(s):
    """A trained adapter, so that the LoRA branch changes the function being decoded."""
    for name, p in s.loaded.model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)


def base_weights(s):
    return {n: p.detach().clone() for n, p in s.loaded.model.named_parameters() if "lora_" not in n}


@pytest.mark.parametrize("decoder", ["dynamic", "static"])
def test_a_merged_adapter_samples_what_the_separate_one_samples_and_leaves_the_base_as_it_was(tiny_dir, decoder):
    s = loaded(tiny_dir, {"r": 4, "alpha": 8})
    trained_adapter(s)
    ps = prompts(s)
    before = base_weights(s)
    separate = generate(s, ps, decoder, adapter="separate")
    merged = generate(s, ps, decoder, adapter="merged")
    assert (separate["adapter"], merged["adapter"]) == ("separate", "merged")
    same_samples(separate["samples"], merged["samples"], 1e-5)
    # Training recomputes them with the adapter apart, as before.
    for x, again in zip(merged["samples"], recomputed(s, ps, merged["samples"], 0.8)):
        assert max(abs(a - b) for a, b in zip(x["logprobs"], again)) < 1e-4
    # The base weights are put back bit for bit, and the adapter is apart again: the reference
    # policy (the adapter switched off) is the base model.
    after = base_weights(s)
    assert all(torch.equal(before[n], after[n]) for n in before)
    from peft.tuners.lora import LoraLayer

    assert not any(m.merged for m in s.loaded.model.modules() if isinstance(m, LoraLayer))
    # The check can fail: without the adapter the same seeds draw other tokens.
    with s.loaded.model.disable_adapter():
        plain = generate(s, ps, decoder, adapter="separate")
    assert [x["ids"] for x in plain["samples"]] != [x["ids"] for x in merged["samples"]]


def test_on_the_cpu_the_adapter_stays_separate_unless_asked_and_a_model_without_one_says_nothing(tiny_dir):
    s = loaded(tiny_dir, {"r": 4, "alpha": 8})
    ps = prompts(s)
    assert generate(s, ps, "dynamic", max_tokens=4)["adapter"] == "separate"
    reply = serve(s, "generate", prompts=ps, n=1, max_tokens=4, adapter="fused")
    assert reply["error"]["kind"] == "bad_request" and "`adapter`" in reply["error"]["message"]
    full = loaded(tiny_dir)
    assert "adapter" not in generate(full, prompts(full), "dynamic", max_tokens=4)


def test_a_merged_adapter_is_put_back_when_decoding_fails(tiny_dir):
    from cudal1_model import sampling

    s = loaded(tiny_dir, {"r": 4, "alpha": 8})
    trained_adapter(s)
    before = base_weights(s)
    with pytest.raises(RuntimeError, match="mid-decode"):
        with sampling.merged_adapter(s.loaded):
            assert not all(torch.equal(before[n], p) for n, p in base_weights(s).items())
            raise RuntimeError("mid-decode")
    after = base_weights(s)
    assert all(torch.equal(before[n], after[n]) for n in before)


def test_rows_that_stop_early_stop_alike_and_greedy_decoding_agrees(tiny_dir):
    s = loaded(tiny_dir)
    ps = prompts(s)
    first = generate(s, ps, "dynamic")["samples"]
    # Pretend a token that was drawn early in one row is the end of sequence: that row stops
    # there, in both decoders, while the others may go on.
    stop = first[1]["ids"][3]
    s.loaded.eos_ids = {stop}
    dynamic = generate(s, ps, "dynamic")["samples"]
    static = generate(s, ps, "static")["samples"]
    assert "stop" in [x["finish_reason"] for x in static]
    assert any(len(x["ids"]) < 24 for x in static)
    same_samples(dynamic, static, 1e-5)
    greedy = [generate(s, ps, d, temperature=0.0, max_tokens=10)["samples"] for d in ("dynamic", "static")]
    same_samples(greedy[0], greedy[1], 1e-5)


def test_decoder_requests_that_cannot_be_served_are_bad_requests(tiny_dir):
    s = loaded(tiny_dir)
    ps = prompts(s)
    reply = serve(s, "generate", prompts=ps, n=1, max_tokens=4, decoder="warp")
    assert reply["error"]["kind"] == "bad_request" and "`decoder`" in reply["error"]["message"]
    if not torch.cuda.is_available():
        reply = serve(s, "generate", prompts=ps, n=1, max_tokens=4, decoder="graphs")
        assert reply["error"]["kind"] == "bad_request" and "CUDA" in reply["error"]["message"]
        # On the CPU, the worker's own choice is the dynamic cache.
        assert call(s, "generate", prompts=ps, n=1, max_tokens=4)["decoder"] == "dynamic"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_adapter_is_merged_and_samples_what_it_samples_apart(tiny_dir):
    s = loaded(tiny_dir, {"r": 4, "alpha": 8}, device="cuda")
    trained_adapter(s)
    ps = prompts(s)
    before = base_weights(s)
    auto = generate(s, ps, "auto")
    assert (auto["decoder"], auto["adapter"]) == ("graphs", "merged")
    apart = generate(s, ps, "auto", adapter="separate")
    assert apart["adapter"] == "separate"
    same_samples(auto["samples"], apart["samples"], 1e-3)
    for x, again in zip(auto["samples"], recomputed(s, ps, auto["samples"], 0.8)):
        assert max(abs(a - b) for a, b in zip(x["logprobs"], again)) < 1e-3
    after = base_weights(s)
    assert all(torch.equal(before[n], after[n]) for n in before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_a_reply_says_what_the_worker_still_holds_of_the_device(tiny_dir):
    # What the engine takes off the device's budget while the policy waits beside its judging.
    s = loaded(tiny_dir, device="cuda")
    m = generate(s, prompts(s), "auto")["memory"]
    assert m["measure"] == "cuda_allocated"
    assert 0 < m["held_bytes"] <= m["reserved_bytes"] <= m["total_bytes"], m
    assert m["held_bytes"] == torch.cuda.memory_reserved(torch.device("cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("lora", [None, {"r": 4, "alpha": 8}])
def test_on_cuda_the_graph_replays_the_static_step(tiny_dir, lora):
    s = loaded(tiny_dir, lora, device="cuda")
    ps = prompts(s)
    auto = generate(s, ps, "auto")
    assert auto["decoder"] == "graphs" and "fallback" not in auto
    static = generate(s, ps, "static")
    same_samples(auto["samples"], static["samples"], 1e-4)
    for x, again in zip(auto["samples"], recomputed(s, ps, auto["samples"], 0.8)):
        assert max(abs(a - b) for a, b in zip(x["logprobs"], again)) < 1e-3
    # A training step changes the weights in place; the next call decodes with the new ones.
    seqs = [{"prompt_ids": ps[x["prompt_index"]], "completion_ids": x["ids"], "advantage": 1.0,
             "old_logprobs": x["logprobs"]} for x in auto["samples"]]
    call(s, "train_step", kind="pg", sequences=seqs, temperature=0.8)
    after = generate(s, ps, "auto")
    for x, again in zip(after["samples"], recomputed(s, ps, after["samples"], 0.8)):
        assert max(abs(a - b) for a, b in zip(x["logprobs"], again)) < 1e-3
