"""The engines' own reward code paths, from their releases (installed by scripts/setup.sh at the
versions in python/constraints.txt), run against a real `cudal1 serve` on the CPU: TRL's
GRPOTrainer (one training step), verl's reward loop (its Hydra config, RewardLoopWorker and the
naive reward manager) and OpenRLHF's SingleTurnAgentExecutor (the file and the HTTP route). A rename
in an engine fails here instead of in a user's run.

The policy is a tiny random model with a byte-level tokenizer made here (cudal1_model.tiny);
nothing is downloaded. What the policy "generates" is scripted (the stand-in for vLLM or the
generation backend): the bundled programs, so that the rewards have a known order.
"""

import asyncio
import importlib
import inspect
import json
import os
import types

import pytest

from conftest import REPO, answer

# Nothing from the Hub: the model and tokenizer are made here, the prompts come from the server.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

SOFTMAX = "level1/11_Softmax_Explicit"
LAYERNORM = "level1/12_LayerNorm_Explicit"


def engine(module, package):
    """Import an engine; skip (or fail where CI needs it: CUDAL1_REQUIRE_ENGINES=1) when missing."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        message = (f"{package} is not installed here ({e}); `bash scripts/setup.sh` installs it "
                   f"at the version in python/constraints.txt")
        if os.environ.get("CUDAL1_REQUIRE_ENGINES") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random Llama and its tokenizer, made locally (nothing from the Hub)."""
    from cudal1_model import tiny as tiny_model

    return tiny_model.make(str(tmp_path_factory.mktemp("tiny") / "model"))


# ---------------------------------------------------------------------------------------------
# TRL


def test_trl_grpo_trainer_takes_a_step_on_cudal1_rewards(serve, tiny, tmp_path):
    """One `GRPOTrainer.train()` step with the synchronous and the asynchronous adapter as reward
    functions, on a prompt set exported by the server and loaded the way docs/rl-engines.md
    shows; the rollout (TRL's `rollout_func`, its hook for a generation backend) answers each
    prompt's group with a correct and a wrong program."""
    trl = engine("trl", "TRL")
    datasets = engine("datasets", "datasets")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cudal1_rl.client import Client
    from cudal1_rl.trl import make_async_reward_func, make_reward_func

    exported = tmp_path / "prompts.jsonl"
    rows = Client().export(tasks=[SOFTMAX, LAYERNORM], per_task=1, key="trl-engine")
    exported.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = datasets.load_dataset("json", data_files=str(exported), split="train")
    assert {"prompt", "task", "prompt_id"} <= set(ds.column_names), ds.column_names

    task_of = {r["prompt"][-1]["content"]: r["task"] for r in rows}
    assert len(task_of) == 2, "each task has its own prompt"
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    variants = ["fast", "wrong"]
    seen = {}

    def rollout(prompts, trainer):
        """Each prompt's k-th copy in the group gets variants[k]; the prompt names its task."""
        prompt_ids, completion_ids, logprobs = [], [], []
        for p in prompts:
            text = p[-1]["content"]
            task = task_of[text]
            k = seen.get(text, 0)
            seen[text] = k + 1
            reply = answer(task, variants[k % 2])
            text = tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
            out = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            prompt_ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
            completion_ids.append(out)
            logprobs.append([0.0] * len(out))
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}

    calls = []

    def recorded(func):
        if inspect.iscoroutinefunction(func):
            async def wrapper(prompts, completions, **kwargs):
                out = await func(prompts, completions, **kwargs)
                calls.append((func.__name__, kwargs["task"], completions, out))
                return out
        else:
            def wrapper(prompts, completions, **kwargs):
                out = func(prompts, completions, **kwargs)
                calls.append((func.__name__, kwargs["task"], completions, out))
                return out
        wrapper.__name__ = func.__name__
        return wrapper

    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4, num_generations=2,
        max_completion_length=4096, learning_rate=1e-3, logging_steps=1, report_to="none", use_cpu=True,
        bf16=False, save_strategy="no", seed=0, log_completions=False,
    )
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = trl.GRPOTrainer(
        model=model, processing_class=tokenizer, train_dataset=ds, args=args, rollout_func=rollout,
        reward_funcs=[recorded(make_reward_func(name="cudal1_sync")),
                      recorded(make_async_reward_func(name="cudal1_async"))],
    )
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()

    assert sorted(call[0] for call in calls) == ["cudal1_async", "cudal1_sync"], calls
    for name, tasks, completions, rewards in calls:
        assert sorted(tasks) == sorted([SOFTMAX, SOFTMAX, LAYERNORM, LAYERNORM]), (name, tasks)
        # TRL decoded the scripted tokens back into the programs (conversational completions);
        # each group's correct program scores 1, its wrong one 0 (the server judges correctness).
        contents = [c[-1]["content"] for c in completions]
        expected = [1.0 if answer(t, "fast") in c else 0.0 for t, c in zip(tasks, contents)]
        assert sorted(expected) == [0.0, 0.0, 1.0, 1.0], (name, contents)
        assert rewards == expected, (name, rewards, expected)
    log = next(h for h in trainer.state.log_history if "reward" in h)
    assert log["rewards/cudal1_sync/mean"] == 0.5 and log["rewards/cudal1_async/mean"] == 0.5, log
    assert log["cudal1/scored"] == 1.0 and log["cudal1/correct"] == 0.5, log
    assert log["reward_std"] > 0, "a group of a correct and a wrong program has an advantage"
    changed = [not (a == b).all() for a, b in zip(before, model.parameters())]
    assert any(changed), "the step trained nothing"


# ---------------------------------------------------------------------------------------------
# verl


def verl_batch(rows, replies, tokenizer):
    """A DataProto as verl's agent loop hands it to the reward loop: left-padded prompts,
    right-padded responses, one attention mask over both, and the dataset's non-tensor columns
    (from the server's exported rows, as verl's RLHFDataset reads them from parquet)."""
    import numpy as np
    import torch
    from verl import DataProto

    pad = tokenizer.pad_token_id
    eos = tokenizer.eos_token_id
    prompts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False)
               for r in rows]
    prompts = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    responses = [tokenizer(x, add_special_tokens=False)["input_ids"] + [eos] for x in replies]
    lp, lr = max(map(len, prompts)), max(map(len, responses)) + 3
    prompt_t = torch.tensor([[pad] * (lp - len(p)) + p for p in prompts])
    response_t = torch.tensor([r + [pad] * (lr - len(r)) for r in responses])
    mask = torch.tensor([[0] * (lp - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (lr - len(r))
                         for p, r in zip(prompts, responses)])
    obj = lambda xs: np.array(xs, dtype=object)  # noqa: E731
    data = DataProto.from_dict(
        tensors={"prompts": prompt_t, "responses": response_t,
                 "input_ids": torch.cat([prompt_t, response_t], 1), "attention_mask": mask},
        non_tensors={"data_source": obj([r["data_source"] for r in rows]),
                     "reward_model": obj([dict(r["reward_model"]) for r in rows]),
                     "extra_info": obj([dict(r["extra_info"]) for r in rows])},
    )
    return data, [len(r) for r in responses]


def verl_config(overrides):
    """verl's own `ppo_trainer` Hydra config, with command-line overrides as main_ppo takes them."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


@pytest.mark.parametrize("name", ["compute_score_async", "compute_score"])
def test_verl_reward_loop_scores_through_its_hydra_config(serve, tiny, name):
    """docs/rl-engines.md's keys, composed into verl's ppo_trainer config; verl's reward loop
    worker (what main_ppo runs as a Ray actor) loads the function with `pkg://`, builds its
    reward manager (`naive`) and scores a batch, one `run_single` per sample, concurrently."""
    engine("verl", "verl")
    from transformers import AutoTokenizer
    from verl.experimental.reward_loop import RewardLoopWorker
    from verl.experimental.reward_loop.reward_manager import NaiveRewardManager
    from verl.trainer.ppo.reward import resolve_reward_manager_cls

    from cudal1_rl.client import Client

    config = verl_config([
        f"actor_rollout_ref.model.path={tiny}", "data.prompt_key=prompt",
        "reward.custom_reward_function.path=pkg://cudal1_rl.verl",
        f"reward.custom_reward_function.name={name}",
        "+reward.custom_reward_function.reward_kwargs.mode=correctness",
    ])
    assert config.reward.reward_manager.name == "naive"
    rows = Client().export(tasks=[SOFTMAX, LAYERNORM], per_task=1, key="verl-engine")
    rows = {r["task"]: r for r in rows}
    tag = f"# verl {name}\n"  # programs no other test sent: judged here, not cached
    batch = [(SOFTMAX, answer(SOFTMAX, "fast", tag)), (SOFTMAX, answer(SOFTMAX, "wrong", tag)),
             (LAYERNORM, answer(LAYERNORM, "fast", tag)), (LAYERNORM, "I could not make it faster.")]
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    data, lengths = verl_batch([rows[t] for t, _ in batch], [reply for _, reply in batch], tokenizer)

    async def run():
        # A Ray actor builds the worker and awaits its methods on one event loop; so here.
        worker = RewardLoopWorker(config)
        assert isinstance(worker.reward_manager, NaiveRewardManager), type(worker.reward_manager)
        assert worker.reward_manager.is_async_reward_score == (name == "compute_score_async")
        return await worker.compute_score_batch(data)

    outputs = asyncio.run(run())
    scores = [o["reward_score"] for o in outputs]
    assert scores == [1.0, 0.0, 1.0, 0.0], outputs
    infos = [o["reward_extra_info"] for o in outputs]
    assert [i["correct"] for i in infos] == [1.0, 0.0, 1.0, 0.0], infos
    assert all(i["scored"] == 1.0 for i in infos), infos
    assert all(set(i) == {"score", "scored", "correct", "speedup", "cached"} for i in infos), infos
    # RewardLoopManager.compute_rm_score: the score sits on each response's last token.
    rm_scores = resolve_reward_manager_cls(config).assemble_rm_scores(data, scores)
    for row, (length, score) in enumerate(zip(lengths, scores)):
        assert rm_scores[row, length - 1] == score and rm_scores[row].sum() == score, rm_scores[row]


def test_verl_legacy_batch_manager_with_compute_score_batch(serve, tiny):
    """Before 0.9 (`reward_model.reward_manager=batch`): verl 0.9.1 still ships the class,
    which calls `compute_score_batch` once for the whole batch."""
    engine("verl", "verl")
    from transformers import AutoTokenizer
    from verl.workers.reward_manager import BatchRewardManager

    from cudal1_rl.client import Client
    from cudal1_rl.verl import compute_score_batch

    rows = Client().export(tasks=[SOFTMAX], per_task=1, key="verl-legacy")
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    data, lengths = verl_batch(rows * 2, [answer(SOFTMAX, "fast"), answer(SOFTMAX, "wrong")], tokenizer)
    manager = BatchRewardManager(tokenizer=tokenizer, num_examine=0, compute_score=compute_score_batch)
    out = manager(data, return_dict=True)
    assert out["reward_extra_info"]["correct"] == [1.0, 0.0], out["reward_extra_info"]
    assert out["reward_tensor"][0, lengths[0] - 1] == 1.0 and out["reward_tensor"].sum() == 1.0


# ---------------------------------------------------------------------------------------------
# OpenRLHF


class ScriptedVllm:
    """The stand-in for a vLLM engine's `generate` as OpenRLHF's agent executors await it:
    answers each prompt (known by its token ids) with a scripted reply."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies = tokenizer, replies

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        text = self.replies[self.tokenizer.decode(prompt_token_ids, skip_special_tokens=False)]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        assert len(ids) <= sampling_params.max_tokens
        out = types.SimpleNamespace(token_ids=ids, text=self.tokenizer.decode(ids), finish_reason="stop",
                                    logprobs=None)
        return types.SimpleNamespace(outputs=[out])


@pytest.mark.parametrize("form", ["file", "url-with-token"])
def test_openrlhf_single_turn_agent_executor_gets_cudal1_rewards(serve, tiny, tmp_path, form):
    """OpenRLHF's PromptDataset reads an exported prompt set with the documented flags
    (`--data.input_key prompt --data.label_key task --data.apply_chat_template`), and its
    SingleTurnAgentExecutor (what each vLLM actor runs for `--reward.remote_url`) decodes prompt
    and reply into the query and asks cudal1 for the reward: through the file, or the server's
    route with the token in the URL (OpenRLHF's HTTP client sends no Authorization header)."""
    engine("openrlhf", "OpenRLHF")
    datasets = engine("datasets", "datasets")
    from openrlhf.datasets import PromptDataset
    from openrlhf.utils.agent import SingleTurnAgentExecutor
    from transformers import AutoTokenizer

    from cudal1_rl.client import Client

    exported = tmp_path / "prompts.jsonl"
    rows = Client().export(tasks=[SOFTMAX, LAYERNORM], per_task=1, key=f"openrlhf-{form}")
    exported.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    # --data.input_key prompt --data.label_key task --data.apply_chat_template, as parsed.
    data_flags = types.SimpleNamespace(input_key="prompt", label_key="task", apply_chat_template=True)
    strategy = types.SimpleNamespace(args=types.SimpleNamespace(data=data_flags), is_rank_0=lambda: True)
    rows = datasets.load_dataset("json", data_files=str(exported), split="train")
    dataset = PromptDataset(rows, tokenizer, strategy)
    assert sorted(dataset.labels) == [SOFTMAX, LAYERNORM], dataset.labels

    if form == "file":
        # `--reward.remote_url a.py,b.py` arrives split at commas.
        remote = [os.path.join(REPO, "python", "cudal1_rl", "openrlhf_reward_func.py")]
    else:
        remote = [f"{serve.url}/openrlhf/get_reward?token=test-token"]
    executor = SingleTurnAgentExecutor(remote)
    assert (executor.reward_func is not None) == (form == "file")

    tag = f"# openrlhf {form}\n"  # programs no other test sent
    cases = []
    for datasource, prompt, label, images in (dataset[i] for i in range(len(dataset))):
        for variant in ("fast", "wrong"):
            cases.append((prompt, label, answer(label, variant, tag), 1.0 if variant == "fast" else 0.0))

    async def run():
        outs = []
        for prompt, label, reply, _ in cases:
            vllm = ScriptedVllm(tokenizer, {prompt: reply})
            params = types.SimpleNamespace(max_tokens=None, logprobs=None)
            outs.append(executor.execute(prompt, label, params, 8192, tokenizer, vllm))
        return await asyncio.gather(*outs)

    import torch

    outputs = asyncio.run(run())
    for (prompt, label, reply, expected), out in zip(cases, outputs):
        assert out["reward"] == [expected] and out["scores"] == [expected], (label, out)
        logs = out["extra_logs"]
        assert logs["cudal1_scored"] == [1.0] and logs["cudal1_correct"] == [expected], logs
        # What samples_generator makes of them (it imports vLLM, so not importable here): tensors.
        torch.tensor([out["reward"]])
        for value in logs.values():
            torch.tensor([value])
