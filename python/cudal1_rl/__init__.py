"""Adapters between RL engines and `cudal1 serve` (standard library only).

- `cudal1_rl.verl`: `compute_score` (sync, async and batch) for verl's
  `custom_reward_function`, and `CudaL1PromptDataset` for `data.custom_cls`.
- `cudal1_rl.trl`: reward functions for TRL's `GRPOTrainer(reward_funcs=...)`.
- `cudal1_rl.openrlhf`: `reward_func(queries, prompts, labels)` for `--remote_rm_url FILE.py`
  (`openrlhf_reward_func.py` is that file).

All talk to the server through `cudal1_rl.client.Client` (URL from $CUDAL1_URL, token from
$CUDAL1_SERVE_TOKEN). See docs/rl-engines.md.
"""

from .client import Client, ServeError, reward_of

__all__ = ["Client", "ServeError", "reward_of"]
