"""One turn of an episode against an OpenAI-compatible engine: a completion request in, a
frozen record out.

The HTTP client is injected and stays the caller's: one ``httpx.AsyncClient`` serves every
episode in flight, so its connection limits must allow the in-flight cap (httpx's default
pool holds 100 connections) and its idle connections must close before the engine's do
(``inference.engine_http.engine_http_client`` makes such a client). Engine failures come
back as a ``TurnResult`` with the error text, never as an exception: a failed turn is an
outcome the controller reads (failures must never grow the cap), not a crash of the
episode's task.

Cancellation is the one thing that is raised, and it is what frees the engine. Cancelling the
task that awaits ``complete`` raises ``CancelledError`` inside httpx, which closes the
connection of an unfinished request; vLLM's completion route watches for the client's
disconnect and aborts the request, freeing its KV blocks. So this module never shields the
request and never catches ``CancelledError``. A turn that outlives ``turn_s`` is cancelled the
same way, so a timed-out request is aborted on the engine too.

    async with engine_http_client(max_connections=1024) as http:
        client = RolloutClient(http, base_url="http://engine-0:8000", model="policy")
        result = await client.complete(Turn(prompt="2 + 2 =", max_tokens=16))
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from workers.core.validation import check_range

# vLLM's default --max-logprobs: the most top logprobs per token an engine returns.
MAX_LOGPROBS = 20


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
    def timeout(self) -> httpx.Timeout:
        """Per-phase limits; reading the answer is bounded by ``turn_s`` as a whole instead."""
        return httpx.Timeout(connect=self.connect_s, write=self.connect_s, read=None, pool=None)


@dataclass(frozen=True, slots=True)
class Turn:
    """What to ask the engine for."""

    prompt: str | tuple[int, ...]  # text, or token ids sent as they are
    max_tokens: int
    temperature: float = 1.0
    logprobs: int | None = None  # top logprobs per sampled token; None asks for none
    ignore_eos: bool = False  # vLLM extension: always generate max_tokens (load tests)

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError("prompt must be non-empty text or token ids")
        if isinstance(self.prompt, tuple) and not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.prompt
        ):
            raise ValueError("prompt token ids must be integers >= 0")
        check_range("max_tokens", self.max_tokens, 1, 1 << 24)
        if not math.isfinite(self.temperature):
            raise ValueError(f"temperature must be finite, got {self.temperature}")
        check_range("temperature", self.temperature, 0.0, 100.0)
        if self.logprobs is not None:
            check_range("logprobs", self.logprobs, 0, MAX_LOGPROBS)

    def body(self, model: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "prompt": list(self.prompt) if isinstance(self.prompt, tuple) else self.prompt,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        if self.logprobs is not None:
            body["logprobs"] = self.logprobs
        if self.ignore_eos:
            body["ignore_eos"] = True
        return body


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What one turn produced; ``error`` is None exactly when it succeeded."""

    tokens: int  # completion tokens the engine generated, as its usage reports; 0 on error
    text: str = ""
    finish_reason: str | None = None  # "length", "stop", ...; None on error
    token_logprobs: tuple[float | None, ...] | None = None  # per sampled token, when asked
    error: str | None = None  # why the turn failed, for logs and the episode's record

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {self.tokens}")

    @property
    def ok(self) -> bool:
        return self.error is None


class RolloutClient:
    """Completion turns against one engine, over a shared HTTP client."""

    def __init__(
        self,
        http: httpx.AsyncClient,
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
        self._url = f"{base_url.rstrip('/')}/v1/completions"
        self._model = model
        self._config = config or RolloutConfig()

    async def complete(self, turn: Turn) -> TurnResult:
        """Send one turn; engine and network failures come back as a result with ``error``."""
        try:
            async with asyncio.timeout(self._config.turn_s):
                response = await self._http.post(
                    self._url, json=turn.body(self._model), timeout=self._config.timeout
                )
        except TimeoutError:
            return self._failed(f"no answer within {self._config.turn_s:g} s; request aborted")
        except httpx.RequestError as exc:  # timeouts, refused or reset connections, bad bodies
            return self._failed(f"{type(exc).__name__}: {exc}")
        if not response.is_success:
            return self._failed(
                f"HTTP {response.status_code} {response.reason_phrase}: {response.text}"
            )
        try:
            return _parse(response.json(), want_logprobs=turn.logprobs is not None)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return self._failed(f"malformed completion response: {type(exc).__name__}: {exc}")

    def _failed(self, error: str) -> TurnResult:
        limit = self._config.max_error_chars
        text = error if len(error) <= limit else f"{error[:limit]}... [{len(error)} chars]"
        return TurnResult(tokens=0, error=f"{self._url}: {text}")


def _parse(data: Mapping[str, Any], *, want_logprobs: bool) -> TurnResult:
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
    return TurnResult(tokens, text, choice.get("finish_reason"), logprobs)
