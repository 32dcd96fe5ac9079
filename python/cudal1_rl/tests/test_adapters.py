"""Each adapter called exactly as its engine calls it (same keywords, batch shapes and return
types, read from the engines' code), against a real `cudal1 serve`."""

import asyncio
import importlib
import importlib.util
import inspect
import os
import uuid

import pytest

from conftest import REPO, answer

SOFTMAX = "level1/11_Softmax_Explicit"
LAYERNORM = "level1/12_LayerNorm_Explicit"


def verl_load(name):
    """verl's `load_extern_object("pkg://cudal1_rl.verl", name)`."""
    module = importlib.import_module("cudal1_rl.verl")
    assert hasattr(module, name)
    return getattr(module, name)


def fresh(task, variant):
    """A program no one has judged yet (a unique comment makes it a new job)."""
    return answer(task, variant, extra=f"# attempt {uuid.uuid4().hex}\n")


def test_verl_compute_score_as_the_naive_prime_and_batch_managers_call_it(serve):
    compute_score = verl_load("compute_score")
    assert not inspect.iscoroutinefunction(compute_score)
    # The naive manager: keywords, with reward_kwargs merged in.
    r = compute_score(data_source="cudal1", solution_str=answer(SOFTMAX, "fast"), ground_truth=SOFTMAX, extra_info={"index": 0})
    assert r == {"score": 1.0, "scored": 1.0, "correct": 1.0, "speedup": 0.0, "cached": r["cached"]}, r
    # The prime manager: positionally.
    r = compute_score("cudal1", answer(SOFTMAX, "wrong"), SOFTMAX, {"index": 1})
    assert (r["score"], r["correct"], r["scored"]) == (0.0, 0.0, 1.0), r
    # The batch manager: lists, one request; a reply without code scores 0 but is scored.
    batch = verl_load("compute_score_batch")
    out = batch(data_sources=["cudal1"] * 3, solution_strs=[answer(LAYERNORM, "fast"), answer(LAYERNORM, "wrong"), "I give up."],
                ground_truths=[LAYERNORM] * 3, extra_infos=[{}, {}, {}])
    assert [(x["score"], x["correct"], x["scored"]) for x in out] == [(1.0, 1.0, 1.0), (0.0, 0.0, 1.0), (0.0, 0.0, 1.0)], out
    assert all(set(x) == {"score", "scored", "correct", "speedup", "cached"} for x in out), "verl needs the same keys for every item"
    # Not judged within the deadline: a number (verl needs one), marked unscored.
    r = compute_score("cudal1", fresh(SOFTMAX, "slow"), SOFTMAX, {}, deadline_s=0, unscored=-1.0)
    assert (r["score"], r["scored"]) == (-1.0, 0.0), r


def test_verl_async_compute_score_is_awaited_concurrently(serve):
    compute_score_async = verl_load("compute_score_async")
    assert inspect.iscoroutinefunction(compute_score_async), "verl's reward loop awaits coroutine functions"

    async def many():
        return await asyncio.gather(*[
            compute_score_async(data_source="cudal1", solution_str=answer(SOFTMAX, v), ground_truth=SOFTMAX, extra_info={})
            for v in ("fast", "slow", "wrong")
        ])

    out = asyncio.run(many())
    assert [x["score"] for x in out] == [1.0, 1.0, 0.0], out


def test_verl_dataset_gives_reproducible_contrastive_prompts_that_link_to_programs(serve):
    import torch.utils.data

    cls = verl_load("CudaL1PromptDataset")
    assert issubclass(cls, torch.utils.data.Dataset), "verl's get_dataset_class checks this"
    config = {"prompt_key": "prompt", "cudal1": {"tasks": [SOFTMAX, LAYERNORM], "per_task": 2, "key": "run-1", "refresh": False}}
    ds = cls(data_files=["unused.parquet"], tokenizer=None, processor=None, config=config, max_samples=-1)
    assert len(ds) == 4
    item = ds[0]
    assert item["reward_model"]["ground_truth"] == SOFTMAX and item["data_source"] == "cudal1"
    assert item["raw_prompt"][-1]["role"] == "user" and "ModelNew" in item["raw_prompt"][-1]["content"]
    assert item["dummy_tensor"].dtype == torch.uint8 and item["index"] == 0
    again = cls(data_files=None, tokenizer=None, processor=None, config=config)
    assert again[0]["raw_prompt"] == item["raw_prompt"] and again[0]["extra_info"]["prompt_id"] == item["extra_info"]["prompt_id"], "the same key gives the same prompt"
    assert ds[1]["reward_model"]["ground_truth"] == LAYERNORM
    assert len(cls(config=config, max_samples=3)) == 3
    # verl's collate_fn and the reward manager hand extra_info on to compute_score: the program
    # is filed under its prompt.
    r = verl_load("compute_score")("cudal1", fresh(SOFTMAX, "fast"), SOFTMAX, item["extra_info"])
    assert r["score"] == 1.0, r


def test_prompts_ask_for_the_language_the_dataset_or_the_export_names(serve):
    from cudal1_rl.client import Client

    cls = verl_load("CudaL1PromptDataset")
    config = {"cudal1": {"tasks": [SOFTMAX], "key": "lang", "language": "triton"}}
    triton = cls(config=config)[0]
    assert triton["extra_info"]["language"] == "triton"
    assert "@triton.jit" in triton["raw_prompt"][-1]["content"], triton["raw_prompt"]
    config["cudal1"].pop("language")
    cuda = cls(config=config)[0]
    assert cuda["extra_info"]["language"] == "cuda", "the server's default"
    assert "@triton.jit" not in cuda["raw_prompt"][-1]["content"]
    assert cuda["extra_info"]["prompt_id"] != triton["extra_info"]["prompt_id"]
    rows = Client().export(tasks=[SOFTMAX], per_task=1, key="lang", language="triton")
    assert [r["language"] for r in rows] == ["triton"] and "@triton.jit" in rows[0]["prompt_text"]


def test_trl_reward_function_as_grpo_trainer_calls_it(serve):
    from cudal1_rl import trl

    logged, metrics = {}, {}
    reward_func = trl.make_reward_func()
    prompts = [[{"role": "user", "content": "make it faster"}]] * 4
    completions = [
        [{"role": "assistant", "content": answer(SOFTMAX, "fast")}],
        [{"role": "assistant", "content": answer(SOFTMAX, "wrong")}],
        [{"role": "assistant", "content": answer(LAYERNORM, "fast")}],
        [{"role": "assistant", "content": "no code here"}],
    ]
    out = reward_func(prompts=prompts, completions=completions, completion_ids=[[1, 2]] * 4,
                      task=[SOFTMAX, SOFTMAX, LAYERNORM, LAYERNORM], prompt_id=[None] * 4, trainer_state=object(),
                      log_extra=lambda c, v: logged.__setitem__(c, v), log_metric=lambda n, v: metrics.__setitem__(n, v))
    assert out == [1.0, 0.0, 1.0, 0.0], out
    assert logged["cudal1_verdict"] == ["correct", "incorrect", "correct", "no_code"], logged
    assert metrics["cudal1/correct"] == 0.5 and metrics["cudal1/scored"] == 1.0
    # Plain-text completions, and an item not judged in time: None (TRL makes it NaN).
    impatient = trl.make_reward_func(deadline_s=0)
    out = impatient(prompts=["p", "p"], completions=[answer(SOFTMAX, "fast"), fresh(LAYERNORM, "wrong")], task=[SOFTMAX, LAYERNORM])
    assert out == [1.0, None], out
    with pytest.raises(ValueError, match="`task` column"):
        reward_func(prompts=["p"], completions=["x"])


def test_a_grpo_batch_larger_than_one_request_gets_a_reward_for_each_completion(serve):
    """2,000 completions of 40 KB (80 MB: five times the server's 16 MiB request) through TRL's
    reward call, and one completion over the server's 256 KiB: the client splits the call to the
    limits `/health` gives; the oversized one gets None with a reason instead of failing the batch."""
    from cudal1_rl import trl
    from cudal1_rl.client import Client

    limits = Client().limits()
    assert limits == {"max_body_bytes": 16 << 20, "max_items": 1024, "max_completion_bytes": 256 << 10}, limits
    prose = "Reasoning about the memory traffic of this kernel. " * 800  # ~40 KB
    program = answer(SOFTMAX, "fast")
    completions = [f"{prose}\n{program}" for _ in range(2000)] + ["x" * (300 << 10)]
    assert len(completions[0]) >= 40_000
    logged = {}
    out = trl.make_reward_func()(prompts=["p"] * len(completions), completions=completions, task=[SOFTMAX] * len(completions),
                                 log_extra=lambda c, v: logged.__setitem__(c, v))
    assert out[:2000] == [1.0] * 2000, sorted(set(map(str, out[:2000])))
    assert out[2000] is None
    assert logged["cudal1_verdict"][2000] == "refused", logged["cudal1_verdict"][2000]


def test_a_413_halves_the_request_until_it_fits():
    """A server whose limits are smaller than the client was told (an older server, a proxy in
    front): the client halves each refused request until it fits, and every item gets its result."""
    import tempfile

    from conftest import Serve
    from cudal1_rl.client import Client

    small = Serve(os.path.join(tempfile.mkdtemp(prefix="cudal1-rl-small-")), extra=("--max-items", "3"))
    try:
        client = Client(url=small.url, token="test-token")
        assert client.limits()["max_items"] == 3
        client._limits = {"max_body_bytes": 1 << 40, "max_items": 1 << 20, "max_completion_bytes": 1 << 40}  # told wrong
        sent = []
        real = client._request

        def counted(method, path, body=None, timeout=None):
            status, parsed = real(method, path, body, timeout)
            if path == "/v1/reward":
                sent.append((len(body["items"]), status))
            return status, parsed

        client._request = counted
        results = client.rewards([{"task": SOFTMAX, "completion": answer(SOFTMAX, "fast")}] * 10)
        assert [r["reward"] for r in results] == [1.0] * 10, results
        assert sent[0] == (10, 413) and all(n <= 3 for n, status in sent if status == 200), sent
    finally:
        small.stop()


def test_trl_async_reward_function(serve):
    from cudal1_rl import trl

    f = trl.make_async_reward_func()
    assert inspect.iscoroutinefunction(f)
    out = asyncio.run(f(prompts=["p"], completions=[answer(LAYERNORM, "wrong")], completion_ids=[[1]], task=[LAYERNORM]))
    assert out == [0.0]


def test_openrlhf_reward_func_file_and_url(serve):
    import torch

    path = os.path.join(REPO, "python", "cudal1_rl", "openrlhf_reward_func.py")
    # OpenRLHF's SingleTurnAgentExecutor loads the file this way.
    spec = importlib.util.spec_from_file_location("reward_func", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    prompt = "<|im_start|>user\nMake it faster.<|im_end|>\n<|im_start|>assistant\n"
    query = prompt + answer(SOFTMAX, "fast") + "<|im_end|>"
    # One sample per call, as OpenRLHF sends them.
    info = module.reward_func([query], [prompt], [SOFTMAX])
    assert info["rewards"] == [1.0] and info["scores"] == [1.0], info
    assert info["extra_logs"]["cudal1_correct"] == [1.0]
    # What OpenRLHF does with it (samples_generator): tensors of every value.
    torch.tensor([info["rewards"]])
    for value in info["extra_logs"].values():
        torch.tensor([value])
    # A query whose prompt is not in it cannot be scored: a number still, marked unscored.
    info = module.reward_func(["no prompt inside"], [prompt], [SOFTMAX])
    assert info["rewards"] == [0.0] and info["extra_logs"]["cudal1_scored"] == [0.0], info
    # `--remote_rm_url http://.../openrlhf/get_reward`: the same JSON over HTTP.
    from cudal1_rl.client import Client

    direct = Client().openrlhf([query, query.replace("Softmax", "x")], [prompt, prompt], [SOFTMAX, SOFTMAX])
    assert set(direct) == {"rewards", "scores", "extra_logs"} and direct["rewards"][0] == 1.0
    # OpenRLHF's own HTTP client sends no Authorization header: the token goes in the URL.
    import json
    import urllib.error
    import urllib.request

    body = json.dumps({"query": [query], "prompts": [prompt], "labels": [SOFTMAX]}).encode()

    def post(url):
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, None

    assert post(serve.url + "/openrlhf/get_reward")[0] == 401
    assert post(serve.url + "/openrlhf/get_reward?token=wrong")[0] == 401
    status, answered = post(serve.url + "/openrlhf/get_reward?token=test-token")
    assert status == 200 and answered["rewards"] == [1.0], answered
    # Only there: other routes still want the header.
    req = urllib.request.Request(serve.url + "/v1/tasks?token=test-token")
    with pytest.raises(urllib.error.HTTPError, match="401"):
        urllib.request.urlopen(req, timeout=30)
    # A query whose prompt did not survive the tokenizer is counted, loudly.
    unmatched = Client().openrlhf(["decoded differently"], [prompt], [SOFTMAX])
    assert unmatched["extra_logs"]["cudal1_scored"] == [0.0]
    metrics = urllib.request.urlopen(urllib.request.Request(serve.url + "/metrics", headers={"Authorization": "Bearer test-token"}), timeout=30).read().decode()
    counted = [line for line in metrics.splitlines() if line.startswith("cudal1_openrlhf_unmatched_queries_total")]
    assert counted and float(counted[0].split()[-1]) >= 2, counted


def test_a_wrong_token_is_refused_with_a_clear_error(serve):
    from cudal1_rl.client import Client, ServeError

    with pytest.raises(ServeError, match="401"):
        Client(token="wrong").rewards([{"task": SOFTMAX, "completion": "x"}])
    with pytest.raises(ServeError, match="unknown task"):
        Client().rewards([{"task": "level9/none", "completion": "x"}])
