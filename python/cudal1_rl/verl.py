"""verl: a custom reward function and a dataset of contrastive prompts.

Reward (verl's `custom_reward_function`): verl's reward managers call
`compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **reward_kwargs)`
(the `naive` manager; the reward loop awaits it when it is a coroutine function, so point
`name` at `compute_score_async` there), positionally `(data_source, solution_str, ground_truth,
extra_info)` (the `prime` manager), or `compute_score_batch(data_sources=..., solution_strs=...,
ground_truths=..., extra_infos=..., **reward_kwargs)` (the `batch` manager). `ground_truth` is the
task (`level1/12_Name`): prompt sets exported by `cudal1 serve` carry it in
`reward_model.ground_truth`, and `extra_info.prompt_id` links the program to its prompt.

Each returns a dict (a list of them for the batch form): `score` (the reward: the speedup of a
correct program in full mode, 1 in correctness mode, 0 otherwise) and numbers verl logs beside
it. verl needs a number for every item, so an item that could not be scored (no verdict within
the deadline, or the reference failed) gets `unscored` (default 0.0) with `scored` 0.

`reward_kwargs` (all optional): `url`, `token`, `mode` (`full` or `correctness`), `deadline_s`,
`unscored`.
"""

import asyncio

from .client import Client, reward_of

_KEYS = ("score", "scored", "correct", "speedup", "cached")
_clients = {}


def _client(url=None, token=None, deadline_s=None):
    key = (url, token, deadline_s)
    if key not in _clients:
        kwargs = {} if deadline_s is None else {"deadline_s": deadline_s}
        _clients[key] = Client(url=url, token=token, **kwargs)
    return _clients[key]


def _item(solution_str, ground_truth, extra_info):
    item = {"task": str(ground_truth), "completion": solution_str}
    prompt_id = (extra_info or {}).get("prompt_id") if isinstance(extra_info, dict) else None
    if prompt_id:
        item["prompt_id"] = str(prompt_id)
    return item


def _score(result, unscored):
    reward = reward_of(result, None)
    speedup = (result or {}).get("speedup") or {}
    return {
        "score": unscored if reward is None else reward,
        "scored": 0.0 if reward is None else 1.0,
        "correct": 1.0 if (result or {}).get("verdict") == "correct" else 0.0,
        "speedup": float(speedup.get("median", 0.0)),
        "cached": 1.0 if (result or {}).get("cached") else 0.0,
    }


def _options(kwargs):
    return (
        _client(kwargs.get("url"), kwargs.get("token"), kwargs.get("deadline_s")),
        kwargs.get("mode"),
        float(kwargs.get("unscored", 0.0)),
    )


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """One item, as verl's `naive` and `prime` reward managers call it."""
    client, mode, unscored = _options(kwargs)
    (result,) = client.rewards([_item(solution_str, ground_truth, extra_info)], mode=mode)
    return _score(result, unscored)


async def compute_score_async(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """One item, awaited (verl's reward loop runs many at once; the server batches nothing, but
    concurrent requests share the queue and its workers)."""
    client, mode, unscored = _options(kwargs)
    (result,) = await client.arewards([_item(solution_str, ground_truth, extra_info)], mode=mode)
    return _score(result, unscored)


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None, **kwargs):
    """A whole batch in one request, as verl's `batch` reward manager calls it."""
    client, mode, unscored = _options(kwargs)
    extra_infos = extra_infos if extra_infos is not None else [None] * len(solution_strs)
    items = [_item(s, g, e) for s, g, e in zip(solution_strs, ground_truths, extra_infos)]
    return [_score(r, unscored) for r in client.rewards(items, mode=mode)]


def _make_dataset_class():
    import torch

    class CudaL1PromptDataset(torch.utils.data.Dataset):
        """Contrastive prompts from `cudal1 serve`, for verl's `data.custom_cls`.

        verl constructs it as `cls(data_files=..., tokenizer=..., processor=..., config=...,
        max_samples=...)`. The prompts come from the server, not the files: `config.cudal1`
        (or environment variables) says where: `url` ($CUDAL1_URL), `tasks` (default: every task
        of the suite; `data_files` naming `*.txt` files of task names also work), `per_task`
        (prompts per task, default 1), `key` (prompt `i` of task `t` is made from key
        `KEY:t:i`, default `verl`), `refresh` (default true: each item is drawn when verl asks
        for it, so later epochs see the programs found since; false fixes every prompt at the
        database as it was when the dataset was made), `language` (`cuda` or `triton`: what the
        prompts ask programs to be written in; default: the server's `--language`).

        An item is what verl's RLHFDataset gives its agent loop: `raw_prompt` (chat messages),
        `data_source`, `reward_model.ground_truth` (the task), `extra_info` (task, prompt_id,
        index, key, as_of, kind, language), `index`, `tools_kwargs`, `interaction_kwargs`, `dummy_tensor`.
        """

        def __init__(self, data_files=None, tokenizer=None, processor=None, config=None, max_samples=-1, **_):
            cfg = dict(_get(config, "cudal1", None) or {})
            self.tokenizer = tokenizer
            self.prompt_key = _get(config, "prompt_key", "prompt")
            self.client = Client(url=cfg.get("url"), token=cfg.get("token"))
            tasks = cfg.get("tasks") or _tasks_from_files(data_files) or self.client.tasks()
            per_task = int(cfg.get("per_task", 1))
            self.key = str(cfg.get("key", "verl"))
            self.refresh = bool(cfg.get("refresh", True))
            # `cuda` or `triton`; the server's `--language` when not given.
            self.language = cfg.get("language")
            self.sampler = {"language": self.language} if self.language else {}
            self.as_of = None if self.refresh else self.client.prompt(tasks[0], key=f"{self.key}:probe", **self.sampler)["as_of"]
            self.entries = [(t, i) for i in range(per_task) for t in tasks]
            if max_samples is not None and 0 < max_samples < len(self.entries):
                self.entries = self.entries[:max_samples]

        def __len__(self):
            return len(self.entries)

        def __getitem__(self, index):
            task, i = self.entries[index]
            key = f"{self.key}:{task}:{i}"
            p = self.client.prompt(task, key=key, as_of=self.as_of, **self.sampler)
            messages = [dict(m) for m in p["messages"]]
            return {
                self.prompt_key: messages,
                "raw_prompt": messages,
                "data_source": "cudal1",
                "reward_model": {"style": "rule", "ground_truth": task},
                "extra_info": {"task": task, "prompt_id": p["prompt_id"], "index": index, "key": key, "as_of": p["as_of"], "kind": p["kind"], "language": p["language"]},
                "index": index,
                "tools_kwargs": {},
                "interaction_kwargs": {},
                "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
            }

    return CudaL1PromptDataset


def _get(config, key, default):
    if config is None:
        return default
    if hasattr(config, "get"):
        return config.get(key, default)
    return getattr(config, key, default)


def _tasks_from_files(data_files):
    if not data_files:
        return []
    files = [data_files] if isinstance(data_files, str) else list(data_files)
    tasks = []
    for f in files:
        if str(f).endswith(".txt"):
            with open(f) as fh:
                tasks += [line.strip() for line in fh if line.strip() and not line.startswith("#")]
    return tasks


def __getattr__(name):
    # `CudaL1PromptDataset` is built on first use, so that importing the reward functions does
    # not import torch.
    if name == "CudaL1PromptDataset":
        cls = _make_dataset_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
