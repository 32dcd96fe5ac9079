"""TRL: reward functions for `GRPOTrainer(reward_funcs=[...])`.

GRPOTrainer calls each reward function as
`f(prompts=..., completions=..., completion_ids=..., trainer_state=..., log_extra=...,
log_metric=..., **columns)` with every other column of the dataset as a keyword list, and awaits
it when it is a coroutine function. Completions are strings, or (conversational datasets) lists
of messages whose assistant content is the answer. A returned `None` becomes NaN, which GRPO
leaves out of the advantage: that is what an item that could not be scored gets.

The task of each row comes from the dataset's `task` column (prompt sets exported by
`cudal1 serve` have it, and `prompt_id`, which links each program to its prompt).
"""

from .client import Client, reward_of


def _text(completion):
    if isinstance(completion, str):
        return completion
    # Conversational: [{"role": "assistant", "content": ...}, ...]
    parts = []
    for m in completion:
        content = m.get("content", "") if isinstance(m, dict) else str(m)
        if isinstance(m, dict) and m.get("role", "assistant") != "assistant":
            continue
        if isinstance(content, list):  # [{"type": "text", "text": ...}]
            content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
        parts.append(content)
    return "\n".join(parts)


def _items(completions, kwargs, task_column):
    tasks = kwargs.get(task_column)
    if tasks is None:
        raise ValueError(f"the dataset has no `{task_column}` column: cudal1 needs the task of each prompt (export prompts with `GET /v1/prompts/export`, which has it)")
    prompt_ids = kwargs.get("prompt_id") or [None] * len(completions)
    items = []
    for c, t, p in zip(completions, tasks, prompt_ids):
        item = {"task": str(t), "completion": _text(c)}
        if p:
            item["prompt_id"] = str(p)
        items.append(item)
    return items


def _log(results, rewards, kwargs):
    log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
    n = max(len(results), 1)
    if callable(log_metric):
        log_metric("cudal1/correct", sum(1.0 for r in results if r and r.get("verdict") == "correct") / n)
        log_metric("cudal1/scored", sum(1.0 for x in rewards if x is not None) / n)
    if callable(log_extra):
        log_extra("cudal1_verdict", [(r or {}).get("verdict") or (r or {}).get("state") for r in results])


def make_reward_func(url=None, token=None, mode=None, task_column="task", deadline_s=None, name="cudal1_reward"):
    """A synchronous reward function: one request per call for the whole batch."""
    client = Client(url=url, token=token, **({} if deadline_s is None else {"deadline_s": deadline_s}))

    def reward_func(prompts, completions, **kwargs):
        results = client.rewards(_items(completions, kwargs, task_column), mode=mode)
        rewards = [reward_of(r) for r in results]
        _log(results, rewards, kwargs)
        return rewards

    reward_func.__name__ = name
    return reward_func


def make_async_reward_func(url=None, token=None, mode=None, task_column="task", deadline_s=None, name="cudal1_reward"):
    """The same, as a coroutine function (GRPOTrainer runs async reward functions together)."""
    client = Client(url=url, token=token, **({} if deadline_s is None else {"deadline_s": deadline_s}))

    async def reward_func(prompts, completions, **kwargs):
        results = await client.arewards(_items(completions, kwargs, task_column), mode=mode)
        rewards = [reward_of(r) for r in results]
        _log(results, rewards, kwargs)
        return rewards

    reward_func.__name__ = name
    return reward_func


def cudal1_reward(prompts, completions, **kwargs):
    """Ready to pass as `reward_funcs=[cudal1_reward]`: server from $CUDAL1_URL."""
    return _default()(prompts, completions, **kwargs)


_made = []


def _default():
    if not _made:
        _made.append(make_reward_func())
    return _made[0]
