"""One turn of an episode against an OpenAI-compatible engine: a completion request in, a
frozen record out.

The HTTP session is injected and stays the caller's: one ``aiohttp.ClientSession`` serves
every episode in flight, so its connection limit must allow the in-flight cap and its idle
connections must close before the engine's do (``inference.engine_http.rollout_session``
makes such a session). Engine failures come
back as a ``TurnResult`` with the error text, never as an exception: a failed turn is an
outcome the controller reads (failures must never grow the cap), not a crash of the
episode's task.

Cancellation is the one thing that is raised, and it is what frees the engine. Cancelling the
task that awaits ``complete`` raises ``CancelledError`` inside aiohttp, which closes the
connection of an unfinished request; vLLM's completion route watches for the client's
disconnect and aborts the request, freeing its KV blocks. So this module never shields the
request and never catches ``CancelledError``. A turn that outlives ``turn_s`` is cancelled the
same way, so a timed-out request is aborted on the engine too.

    async with rollout_session(max_connections=1024) as http:
        client = RolloutClient(http, base_url="http://engine-0:8000", model="policy")
        result = await client.complete(Turn(prompt="2 + 2 =", max_tokens=16))
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from workers.core.turns import Turn, TurnResult
from workers.core.validation import check_range


@dataclass(frozen=True, slots=True)
class RolloutConfig:
    """Time limits of one turn and how much of an error body to keep."""

    # An engine on the cluster network accepts in milliseconds; seconds mean it is not there.
    connect_s: float = 5.0
    # The whole turn, queueing included: a long answer at a saturated engine takes minutes.
    turn_s: float = 900.0
    # Enough of an error body to name the fault (vLLM's JSON errors are ~200 characters).
    max_error_chars: int = 500

    def __post_init__(self) -> None:
        for name in ("connect_s", "turn_s"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value}")
            check_range(name, value, 0.001, 86_400.0)
        check_range("max_error_chars", self.max_error_chars, 16, 1_000_000)

    @property
    def timeout(self) -> aiohttp.ClientTimeout:
        """The connect limit; the answer, queueing included, is bounded by ``turn_s``."""
        return aiohttp.ClientTimeout(total=None, sock_connect=self.connect_s)


class TokenizeError(Exception):
    """The engine could not tokenize a text; the message says why and where."""


class RolloutClient:
    """Completion turns against one engine, over a shared HTTP client."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        *,
        base_url: str,
        model: str,
        config: RolloutConfig | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not model:
            raise ValueError("model must be the engine's served model name, got ''")
        self._http = http
        base = base_url.rstrip("/")
        self._url = f"{base}/v1/completions"
        self._tokenize_url = f"{base}/tokenize"  # vLLM serves it beside /v1, not under it
        self._model = model
        self._config = config or RolloutConfig()

    async def complete(self, turn: Turn) -> TurnResult:
        """Send one turn; engine and network failures come back as a result with ``error``."""
        answer = await self._post(self._url, turn.body(self._model), "completion")
        if isinstance(answer, str):
            return self._failed(self._url, answer)
        try:
            return _parse(
                answer, want_logprobs=turn.logprobs is not None, want_ids=turn.return_token_ids
            )
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return self._failed(
                self._url, f"malformed completion response: {type(exc).__name__}: {exc}"
            )

    async def tokenize(self, text: str, *, add_special_tokens: bool) -> tuple[int, ...]:
        """The engine's token ids of ``text`` (vLLM's ``/tokenize``); TokenizeError on any
        failure. ``add_special_tokens`` adds BOS and the like: right for a prompt's start,
        wrong for an observation appended to a context."""
        body = {"model": self._model, "prompt": text, "add_special_tokens": add_special_tokens}
        answer = await self._post(self._tokenize_url, body, "tokenize")
        if isinstance(answer, str):
            raise TokenizeError(self._error_text(self._tokenize_url, answer))
        tokens = answer.get("tokens") if isinstance(answer, Mapping) else None
        if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens
        ):
            raise TokenizeError(
                self._error_text(self._tokenize_url, f"malformed tokenize response: {answer!r}")
            )
        return tuple(tokens)

    async def _post(self, url: str, body: Mapping[str, Any], what: str) -> Any:
        """The answer's JSON, or the text of why there is none; only cancellation raises."""
        try:
            async with (
                asyncio.timeout(self._config.turn_s),
                self._http.post(url, json=body, timeout=self._config.timeout) as response,
            ):
                status, reason, text = response.status, response.reason, await response.text()
        except TimeoutError:
            return f"no answer within {self._config.turn_s:g} s; request aborted"
        except (aiohttp.ClientError, UnicodeDecodeError) as exc:  # refused, reset, bad body
            return f"{type(exc).__name__}: {exc}"
        if not 200 <= status < 300:
            return f"HTTP {status} {reason}: {text}"
        try:
            return json.loads(text)
        except ValueError as exc:
            return f"malformed {what} response, not JSON: {exc}"

    def _failed(self, url: str, error: str) -> TurnResult:
        return TurnResult(tokens=0, error=self._error_text(url, error))

    def _error_text(self, url: str, error: str) -> str:
        limit = self._config.max_error_chars
        text = error if len(error) <= limit else f"{error[:limit]}... [{len(error)} chars]"
        return f"{url}: {text}"


def _parse(data: Mapping[str, Any], *, want_logprobs: bool, want_ids: bool) -> TurnResult:
    """The first choice and the usage of an OpenAI completion body."""
    choice = data["choices"][0]
    text = choice["text"]
    if not isinstance(text, str):
        raise TypeError(f"choices[0].text is {type(text).__name__}, not str")
    tokens = data["usage"]["completion_tokens"]
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"usage.completion_tokens is {tokens!r}, not an integer >= 0")
    logprobs = None
    if want_logprobs:
        logprobs = tuple(
            None if value is None else float(value)
            for value in choice["logprobs"]["token_logprobs"]
        )
    token_ids = None
    if want_ids:
        ids = choice.get("token_ids")
        if not isinstance(ids, list) or len(ids) != tokens:
            raise ValueError(
                f"choices[0].token_ids is {ids!r:.80}, not a list of {tokens} ids "
                "(the engine must be vLLM >= 0.10.2, which answers return_token_ids)"
            )
        token_ids = tuple(int(t) for t in ids)
    return TurnResult(tokens, text, choice.get("finish_reason"), logprobs, token_ids)
