"""A latency-gradient limiter in the style of Netflix concurrency-limits' Gradient2.

The classic anchor from outside LLM serving: it knows nothing of KV caches or preemptions
and sizes the pool from latency alone. Its latency is the engines' time per generated token
per request in the engine, queued ones included: poll interval x (running + waiting for
capacity) / tokens generated. A crowded engine decodes each request more slowly and queues
the rest, so this rises past the knee as a request's round trip does.

Every poll with tokens:

- short = this poll's latency; long = an exponential average of it over ``long_window_polls``
  polls (after a load drop, when long / short exceeds ``recovery_ratio``, long decays by
  ``long_decay`` so the limiter does not stay timid for minutes);
- gradient = clamp(``tolerance`` x long / short, ``min_gradient``, 1.0): 1.0 while latency
  is within the tolerance, less as it rises past it;
- target = limit x gradient + sqrt(limit) (the queue allowance), and the limit moves by
  ``smoothing`` of the way to it.

Above the limit the controller grows toward the target on completions (``Reading.ceiling``);
below it, a trim that sheds nothing. A poll without generated tokens says nothing about
latency and holds the limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from workers.core.controller.policies.base import PoolView, Proposal, Reading
from workers.core.controller.policies.signals import OverloadTracker, overload_figures
from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, DecisionKind, Signal
from workers.core.validation import check_range, stored_optional_number


@dataclass(frozen=True, slots=True)
class Gradient2Config:
    """Gradient2's settings; the defaults are Netflix's where it has them."""

    tolerance: float = 1.5  # Netflix Gradient2: latency may reach 1.5x its long-term level
    smoothing: float = 0.2  # Netflix Gradient2: the limit moves 20 % of the way per sample
    long_window_polls: int = 60  # long-term average over 5 min of 5 s polls (Netflix: 600
    # requests; a poll aggregates hundreds of tokens, so fewer samples cover the same span)
    min_gradient: float = 0.5  # Netflix clamps the gradient to [0.5, 1.0]
    recovery_ratio: float = 2.0  # Netflix: long / short above 2 means the load dropped...
    long_decay: float = 0.95  # ...and the long-term average decays by 5 % a sample
    max_growth: float = 2.0  # growth per turnover toward the target, as pacer's slow start

    def __post_init__(self) -> None:
        check_range("tolerance", self.tolerance, 1.0, 10.0)
        check_range("smoothing", self.smoothing, 0.01, 1.0)
        check_range("long_window_polls", self.long_window_polls, 1, 100_000)
        check_range("min_gradient", self.min_gradient, 0.01, 1.0)
        check_range("recovery_ratio", self.recovery_ratio, 1.0, 100.0)
        check_range("long_decay", self.long_decay, 0.01, 1.0)
        check_range("max_growth", self.max_growth, 1.0, 4.0)


class Gradient2Policy:
    """Grows while per-token latency stays near its long-term level, shrinks as it rises."""

    name: ClassVar[str] = "gradient2"
    rescaled: ClassVar[bool] = False  # its latency reading follows a lost engine at once

    def __init__(self, config: Gradient2Config | None = None) -> None:
        self.config = config or Gradient2Config()
        # Only for the figures every reading reports; Gradient2 itself reads no overload.
        self._overload = OverloadTracker(queue_ratio=0.5, queue_polls=6)
        self._long: float | None = None
        self._last_at: float | None = None
        self._target: float | None = None
        self._figures: dict[str, float] = {}

    def read(self, poll: PollSummary, pool: PoolView) -> Reading:
        overload = self._overload.update(poll, draining=pool.draining)
        figures = overload_figures(overload, poll)
        short = self._latency(poll)
        self._target = None if short is None else self._next_limit(short, pool.level)
        figures.update(self._figures)
        if self._target is None or self._target <= pool.level:
            return Reading(Signal.SOFT, Cause.LATENCY, 1.0, figures)
        return Reading(Signal.CLEAR, Cause.CLEAR, self.config.max_growth, figures, self._target)

    def propose(self, reading: Reading, pool: PoolView) -> Proposal | None:
        target = self._target
        if target is None or target >= pool.level:
            return None
        detail = f"limit {pool.level:.1f} -> {target:.1f}, gradient {self._figures['gradient']:.3f}"
        return Proposal(DecisionKind.TRIM, target, False, Cause.LATENCY, detail)

    def _latency(self, poll: PollSummary) -> float | None:
        """Seconds per generated token per request in the engines, since the last poll."""
        last, self._last_at = self._last_at, poll.at
        if last is None or poll.at <= last or poll.generation_tokens <= 0:
            return None
        in_engine = poll.running + poll.waiting_capacity
        return (poll.at - last) * max(1, in_engine) / poll.generation_tokens

    def _next_limit(self, short: float, limit: float) -> float:
        cfg = self.config
        long = short if self._long is None else self._long
        long += (short - long) / cfg.long_window_polls
        if long / short > cfg.recovery_ratio:
            long *= cfg.long_decay
        self._long = long
        gradient = max(cfg.min_gradient, min(1.0, cfg.tolerance * long / short))
        wanted = limit * gradient + math.sqrt(limit)
        self._figures = {"latency_short": short, "latency_long": long, "gradient": gradient}
        return limit * (1.0 - cfg.smoothing) + wanted * cfg.smoothing

    def pool_changed(self, factor: float) -> None:
        """Never called (``rescaled`` is False): its long-term latency is per token and
        request, which a smaller pool keeps."""

    def paused(self) -> None:
        """Its latencies are per completed request; a pause measures none."""

    def to_json(self) -> dict[str, Any]:
        return {"long": self._long}

    def load_json(self, data: Mapping[str, Any]) -> None:
        """The long-term latency survives a restart; the next poll starts a new interval."""
        self._long = stored_optional_number(data, "long", low=0.0)
        self._last_at = None
