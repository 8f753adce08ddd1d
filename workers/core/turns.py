"""One turn of an episode as an engine sees it: what is asked, and what comes back.

The rollout client (``inference.rollout_client``) sends these over HTTP, the benchmarks'
virtual engines answer them in-process, and environments build episodes out of them, so
the record lives here, in the pure core, where all three can reach it.

Token ids travel both ways: an episode's context grows in place as token ids (prompt, then
each answer as sampled, then each observation), so a multi-turn conversation is never
re-tokenized, its prefix stays cached on the engine, and the loss mask lines up with the
tokens the trainer will see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from workers.core.validation import check_range

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs: the most top logprobs per token returned


@dataclass(frozen=True, slots=True)
class Turn:
    """What to ask the engine for."""

    prompt: str | tuple[int, ...]  # text, or token ids sent as they are
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    logprobs: int | None = None  # top logprobs per sampled token; None asks for none
    ignore_eos: bool = False  # vLLM extension: always generate max_tokens (load shapes)
    seed: int | None = None  # per-request sampling seed, for reproducible rollouts
    return_token_ids: bool = False  # vLLM >= 0.10.2: answer with the sampled token ids

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError("prompt must be non-empty text or token ids")
        if isinstance(self.prompt, tuple) and not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.prompt
        ):
            raise ValueError("prompt token ids must be integers >= 0")
        check_range("max_tokens", self.max_tokens, 1, 1 << 24)
        for name, high in (("temperature", 100.0), ("top_p", 1.0)):
            value = getattr(self, name)
            if isinstance(value, float | int) and not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value}")
            check_range(name, value, 0.0, high)
        if self.logprobs is not None:
            check_range("logprobs", self.logprobs, 0, MAX_LOGPROBS)
        if self.seed is not None:
            check_range("seed", self.seed, 0, (1 << 63) - 1)

    def body(self, model: str) -> dict[str, Any]:
        """The OpenAI completion request body, with vLLM's extensions where asked for."""
        body: dict[str, Any] = {
            "model": model,
            "prompt": list(self.prompt) if isinstance(self.prompt, tuple) else self.prompt,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        if self.top_p != 1.0:
            body["top_p"] = self.top_p
        if self.logprobs is not None:
            body["logprobs"] = self.logprobs
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.seed is not None:
            body["seed"] = self.seed
        if self.return_token_ids:
            body["return_token_ids"] = True
        return body


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What one turn produced; ``error`` is None exactly when it succeeded."""

    tokens: int  # completion tokens the engine generated, as its usage reports; 0 on error
    text: str = ""
    finish_reason: str | None = None  # "length", "stop", ...; None on error
    token_logprobs: tuple[float | None, ...] | None = None  # per sampled token, when asked
    token_ids: tuple[int, ...] | None = None  # the sampled ids, when asked for
    error: str | None = None  # why the turn failed, for logs and the episode's record

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {self.tokens}")

    @property
    def ok(self) -> bool:
        return self.error is None
