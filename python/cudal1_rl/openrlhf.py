"""OpenRLHF: `reward_func(queries, prompts, labels)` for `--remote_rm_url FILE.py`.

OpenRLHF loads the file named by `--remote_rm_url` when it ends in `.py` and calls its
`reward_func(queries, prompts, labels)` (one sample per call, in a thread), where a query is the
prompt and the response decoded together and a label comes from `--label_key` (`task` on a
prompt set exported by `cudal1 serve`). It expects `{"rewards", "scores", "extra_logs"}` and
makes tensors of them, so every value is a number: a query that could not be scored gets
`CUDAL1_UNSCORED` (default 0.0) with `cudal1_scored` 0 in `extra_logs`.

Pointing `--remote_rm_url` straight at `http://HOST:8377/openrlhf/get_reward` works too; this
file adds patience (OpenRLHF's own client gives up after 5 tries) and the token.
"""

import os

from .client import Client

_clients = []


def _client():
    if not _clients:
        _clients.append(Client())
    return _clients[0]


def reward_func(queries, prompts, labels, **kwargs):
    unscored = float(os.environ.get("CUDAL1_UNSCORED", "0"))
    answer = _client().openrlhf(queries, prompts, labels)
    rewards = [unscored if r is None else float(r) for r in answer["rewards"]]
    scores = [unscored if r is None else float(r) for r in answer["scores"]]
    return {"rewards": rewards, "scores": scores, "extra_logs": answer.get("extra_logs", {})}
