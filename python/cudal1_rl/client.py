"""A small client of `cudal1 serve` (standard library only).

Reward requests are idempotent on the server (the same task, code and settings are one job), so
the client sends the same request again when the connection fails, the server answers 5xx or
items are still pending: a server restart or a slow queue costs time, never a second evaluation.
"""

import asyncio
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8377"
# The server's own defaults, for a server that does not say its limits (`/health`'s `limits`).
DEFAULT_LIMITS = {"max_body_bytes": 16 << 20, "max_items": 1024, "max_completion_bytes": 256 << 10}
# Room in a request's body for everything but the items.
_BODY_SLACK = 4096


class ServeError(RuntimeError):
    """The server refused a request (4xx): retrying the same request cannot help."""

    def __init__(self, status, body):
        self.status = status
        self.body = body
        message = body.get("error") if isinstance(body, dict) else None
        hint = body.get("hint") if isinstance(body, dict) else None
        text = f"cudal1 serve answered {status}: {message or body}"
        if hint:
            text += f" (hint: {hint})"
        super().__init__(text)


class Client:
    """`url` defaults to $CUDAL1_URL, then http://127.0.0.1:8377; the bearer token to
    $CUDAL1_SERVE_TOKEN. `deadline_s` bounds how long one call keeps trying (long polls,
    reconnections); items still pending then come back with `reward` None."""

    def __init__(self, url=None, token=None, deadline_s=1800.0, poll_s=60.0, retry_pause_s=1.0):
        self.url = (url or os.environ.get("CUDAL1_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("CUDAL1_SERVE_TOKEN")
        self.deadline_s = float(deadline_s)
        self.poll_s = float(poll_s)
        self.retry_pause_s = float(retry_pause_s)
        self._limits = None

    # -- transport --------------------------------------------------------------------------

    def _request(self, method, path, body=None, timeout=None):
        """One HTTP exchange: (status, parsed body). Connection failures raise OSError."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        ctype_json = raw[:1] in (b"{", b"[")
        if ctype_json:
            try:
                return status, json.loads(raw)
            except ValueError:
                pass
        return status, raw.decode("utf-8", "replace")

    def _call(self, method, path, body=None, timeout=60.0, deadline=None):
        """Retries connection failures and 5xx answers until `deadline` (monotonic seconds)."""
        deadline = deadline if deadline is not None else time.monotonic() + self.deadline_s
        last = None
        while True:
            try:
                status, parsed = self._request(method, path, body, timeout=timeout)
                if status < 500:
                    if status >= 400:
                        raise ServeError(status, parsed)
                    return parsed
                last = ServeError(status, parsed)
            except OSError as e:  # refused, reset, timed out: the server may be restarting
                last = e
            if time.monotonic() + self.retry_pause_s >= deadline:
                raise TimeoutError(f"cudal1 serve at {self.url} did not answer in time: {last}") from last
            time.sleep(self.retry_pause_s)

    # -- routes -----------------------------------------------------------------------------

    def health(self):
        return self._call("GET", "/health", timeout=10.0, deadline=time.monotonic() + 10.0)

    def tasks(self):
        return self._call("GET", "/v1/tasks")["tasks"]

    def prompt(self, task, key=None, as_of=None, **sampler):
        body = {"task": task, **{k: v for k, v in sampler.items() if v is not None}}
        if key is not None:
            body["key"] = key
        if as_of is not None:
            body["as_of"] = as_of
        return self._call("POST", "/v1/prompt", body)

    def export(self, tasks=None, per_task=1, key=None, as_of=None, language=None):
        query = {"per_task": per_task}
        if language is not None:  # `cuda` or `triton`; the server's `--language` by default
            query["language"] = language
        if tasks:
            query["tasks"] = ",".join(tasks)
        if key is not None:
            query["key"] = key
        if as_of is not None:
            query["as_of"] = as_of
        text = self._call("GET", "/v1/prompts/export?" + urllib.parse.urlencode(query), timeout=300.0)
        if isinstance(text, dict):  # a single row parses as one object
            return [text]
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def limits(self):
        """The server's request limits (`/health`), asked once; its defaults where it does not say."""
        if self._limits is None:
            try:
                said = self.health().get("limits") or {}
            except (OSError, TimeoutError, ServeError):
                said = {}
            self._limits = {k: int(said.get(k) or v) for k, v in DEFAULT_LIMITS.items()}
        return self._limits

    def rewards(self, items, mode=None, deadline_s=None):
        """Results of `items` (dicts with `task`, `completion`, optionally `prompt_id`, `group`,
        `id`), in order. Keeps asking until none is pending or the deadline passes. A call larger
        than the server takes in one request is sent in several; a completion over the server's
        limit gets its own result (`reward` None, `state` "refused", the reason), never a failed
        call."""
        if not items:
            return []
        deadline = time.monotonic() + (self.deadline_s if deadline_s is None else float(deadline_s))
        items = _indexed(items)
        results = [None] * len(items)
        limits = self.limits()
        todo = []
        for place, item in enumerate(items):
            size = len(str(item.get("completion", "")).encode("utf-8"))
            if size > limits["max_completion_bytes"]:
                results[place] = _refused(f"the completion has {size} bytes; the server takes at most {limits['max_completion_bytes']}")
            else:
                todo.append(place)
        while todo:
            still = []
            for chunk in _chunks(todo, items, limits):
                for place, r in self._reward_chunk(chunk, items, mode, deadline):
                    results[place] = r
                    if r.get("state") == "pending":
                        still.append(place)
            todo = sorted(still)
            if todo and time.monotonic() >= deadline:
                break
        return results

    def _reward_chunk(self, chunk, items, mode, deadline):
        """(place, result) for one request's items; a 413 (the server's limits smaller than
        said) halves the request until it fits."""
        left = deadline - time.monotonic()
        body = {"items": [items[i] for i in chunk], "wait_s": max(0.0, min(self.poll_s, left))}
        if mode is not None:
            body["mode"] = mode
        try:
            answer = self._call("POST", "/v1/reward", body, timeout=body["wait_s"] + 30.0, deadline=deadline)
        except ServeError as e:
            if e.status != 413:
                raise
            if len(chunk) == 1:
                return [(chunk[0], _refused(f"the server refused it as too large: {e}"))]
            half = len(chunk) // 2
            return self._reward_chunk(chunk[:half], items, mode, deadline) + self._reward_chunk(chunk[half:], items, mode, deadline)
        return list(zip(chunk, answer["results"]))

    async def arewards(self, items, mode=None, deadline_s=None):
        """As `rewards`, off the event loop (one thread per call)."""
        return await asyncio.to_thread(self.rewards, items, mode, deadline_s)

    def openrlhf(self, queries, prompts, labels, deadline_s=None):
        """OpenRLHF's remote reward shape, retried while the server answers 503 (still judging)."""
        deadline = time.monotonic() + (self.deadline_s if deadline_s is None else float(deadline_s))
        body = {"query": list(queries), "prompts": list(prompts), "labels": list(labels)}
        return self._call("POST", "/openrlhf/get_reward", body, timeout=300.0, deadline=deadline)


def reward_of(result, unscored=None):
    """A result's reward, or `unscored` when it has none (failed, or still pending)."""
    if result is None or result.get("reward") is None:
        return unscored
    return float(result["reward"])


def _refused(reason):
    """The result of an item the server would refuse: no reward, and why."""
    return {"state": "refused", "reward": None, "verdict": None, "reason": reason}


def _chunks(places, items, limits):
    """`places` in runs that fit one request: at most `max_items` items and `max_body_bytes` of
    body (each item measured as JSON)."""
    budget = limits["max_body_bytes"] - _BODY_SLACK
    chunk, size = [], 0
    for place in places:
        item_size = len(json.dumps(items[place]).encode("utf-8")) + 2
        if chunk and (len(chunk) >= limits["max_items"] or size + item_size > budget):
            yield chunk
            chunk, size = [], 0
        chunk.append(place)
        size += item_size
    if chunk:
        yield chunk


def _indexed(items):
    """`items` with every group member's `index` filled in (its place among this call's members of
    the group, as the server would take it): the calls that ask again for pending items send only
    some members, and without an index they would take other members' places."""
    counts = {}
    out = []
    for item in items:
        group = item.get("group")
        if group and group.get("index") is None:
            place = counts.get(group["id"], 0)
            counts[group["id"]] = place + 1
            item = {**item, "group": {**group, "index": place}}
        out.append(item)
    return out
