"""What a request asks of its output, and the plan of how long that output will be.

A real model decides its length token by token; the simulator decides it up front, from the
same inputs: ``max_tokens`` and the model length bound it, an end-of-sequence length drawn
from a distribution (the engine's, or the request's own) ends it earlier unless ``ignore_eos``
is set, and a stop string ends it where the seeded text first contains it. Knowing the length
in advance costs nothing in fidelity and lets the scheduler count tokens instead of sampling.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inference.sim import text
from inference.sim.request import FinishReason

# Tokens; far beyond any model length, yet small enough that every draw is a finite float.
MAX_LENGTH_MEAN = 1_000_000_000


class RequestError(ValueError):
    """A request the engine refuses, with the message a client should see (HTTP 400)."""


class LengthKind(enum.StrEnum):
    FIXED = "fixed"  # always ``mean`` tokens
    UNIFORM = "uniform"  # uniform on mean * (1 - spread) .. mean * (1 + spread)
    LOGNORMAL = "lognormal"  # lognormal with this mean and ``spread`` the sigma of its log


@dataclass(frozen=True, slots=True)
class LengthDistribution:
    """End-of-sequence lengths, in tokens; parsed from ``kind:mean[:spread]``."""

    kind: LengthKind
    mean: float  # mean length in tokens
    spread: float = 0.0  # uniform: relative half-width (0..1); lognormal: sigma of the log

    def __post_init__(self) -> None:
        # A draw is rounded to an int: an infinite (or overflowing) one would raise mid-plan.
        if not 1.0 <= self.mean <= MAX_LENGTH_MEAN:
            raise ValueError(f"length mean must be 1..{MAX_LENGTH_MEAN} tokens, got {self.mean}")
        if self.kind is LengthKind.UNIFORM and not 0.0 <= self.spread <= 1.0:
            raise ValueError(f"uniform spread must be in 0..1, got {self.spread}")
        if self.kind is LengthKind.LOGNORMAL and not 0.0 <= self.spread <= 4.0:
            raise ValueError(f"lognormal sigma must be in 0..4, got {self.spread}")

    @classmethod
    def parse(cls, spec: str) -> LengthDistribution:
        """``fixed:256``, ``uniform:300:0.5`` or ``lognormal:400:0.8``."""
        parts = spec.split(":")
        kinds = ", ".join(kind.value for kind in LengthKind)
        try:
            kind = LengthKind(parts[0])
            numbers = [float(part) for part in parts[1:]]
        except ValueError as exc:
            raise ValueError(
                f"bad length spec {spec!r}: want kind:mean[:spread], kind one of {kinds}"
            ) from exc
        if len(numbers) not in (1, 2):
            raise ValueError(f"bad length spec {spec!r}: want kind:mean[:spread]")
        return cls(kind, *numbers)

    def sample(self, rng: np.random.Generator) -> int:
        if self.kind is LengthKind.FIXED:
            value = self.mean
        elif self.kind is LengthKind.UNIFORM:
            value = rng.uniform(self.mean * (1 - self.spread), self.mean * (1 + self.spread))
        else:
            mu = np.log(self.mean) - self.spread**2 / 2  # so that the mean is ``mean``
            value = rng.lognormal(mu, self.spread)
        return max(1, round(value))


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """The output-shaping fields of a completion request, as vLLM reads them."""

    max_tokens: int | None = None  # None: whatever the model length leaves after the prompt
    min_tokens: int = 0  # no end of sequence or stop string before this many tokens
    stop: tuple[str, ...] = ()  # strings that end the output (not included in its text)
    ignore_eos: bool = False  # generate exactly max_tokens (benchmarks use this)
    seed: int | None = None  # fixes the output ids and length draw, whatever else runs
    length: LengthDistribution | None = None  # overrides the engine's end-of-sequence lengths
    structured: bool = False  # grammar-constrained output: deferred while the grammar compiles

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            raise RequestError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.min_tokens < 0:
            raise RequestError(f"min_tokens must be >= 0, got {self.min_tokens}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise RequestError(
                f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens})"
            )
        if any(not stop for stop in self.stop):
            raise RequestError("stop strings must not be empty")


@dataclass(frozen=True, slots=True)
class OutputPlan:
    max_tokens: int  # the bound the request runs under
    num_tokens: int  # tokens it will generate
    reason: FinishReason  # why it will stop there


def plan_output(
    params: SamplingParams,
    num_prompt_tokens: int,
    max_model_len: int,
    default_length: LengthDistribution | None,
    rng: np.random.Generator,
    output_seed: int,
) -> OutputPlan:
    """Decides a request's output length; raises RequestError if it cannot fit the model.

    As vLLM 0.32's ``get_max_tokens``: ``max_tokens`` (asked or defaulted) is clamped to the
    room the prompt leaves, so a turn near the context limit ends with ``length``; only a
    ``max_tokens`` above the model length itself, or a prompt that leaves no room, is refused.
    """
    if params.max_tokens is not None and params.max_tokens > max_model_len:
        raise RequestError(
            f"max_tokens={params.max_tokens} cannot be greater than "
            f"max_model_len={max_model_len}. Please request fewer output tokens."
        )
    room = max_model_len - num_prompt_tokens
    if room < 1:
        raise RequestError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt has {num_prompt_tokens} tokens, leaving no room for a completion."
        )
    max_tokens = room if params.max_tokens is None else min(params.max_tokens, room)
    # The bound is known only now; vLLM refuses min_tokens above it, clamped or not.
    if params.min_tokens > max_tokens:
        raise RequestError(
            f"min_tokens ({params.min_tokens}) must be <= max_tokens ({max_tokens}: what the "
            f"model's maximum context length of {max_model_len} leaves after the prompt)"
        )
    num_tokens, reason = max_tokens, FinishReason.LENGTH
    length = params.length or default_length
    if length is not None and not params.ignore_eos:
        eos_at = max(length.sample(rng), params.min_tokens)
        if eos_at < num_tokens:
            num_tokens, reason = eos_at, FinishReason.STOP
    if params.stop:
        pieces = [
            text.token_text(token_id)
            for token_id in text.output_token_ids(output_seed, 0, num_tokens).tolist()
        ]
        stop = find_stop(pieces, params.stop, params.min_tokens)
        if stop is not None:
            num_tokens, reason = stop.num_tokens, FinishReason.STOP
    return OutputPlan(max_tokens=max_tokens, num_tokens=num_tokens, reason=reason)


@dataclass(frozen=True, slots=True)
class StopMatch:
    """The stop string occurrence that ends an output."""

    start: int  # character offset where it begins: the visible text ends there
    num_tokens: int  # tokens up to and including the one that completes it


def find_stop(pieces: Sequence[str], stops: tuple[str, ...], min_tokens: int) -> StopMatch | None:
    """The first stop string completed after the first ``min_tokens`` tokens' text, if any.

    The plan (how many tokens) and the response (where its text is cut) both ask this, so
    they cannot disagree. ``min_tokens`` must not exceed ``len(pieces)``.
    """
    ends = np.cumsum([len(piece) for piece in pieces])
    joined = "".join(pieces)
    search_from = int(ends[min_tokens - 1]) if min_tokens > 0 else 0
    found = [
        (pos + len(stop), pos) for stop in stops if (pos := joined.find(stop, search_from)) >= 0
    ]
    if not found:
        return None
    end, start = min(found)
    return StopMatch(start=start, num_tokens=int(np.searchsorted(ends, end)) + 1)
