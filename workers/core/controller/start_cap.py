"""The start cap: given, or derived once from what the engines report.

Derived, it is every episode's worst case: the pool's KV tokens / max model length (or the
per-episode token budget when smaller), so that every episode fits. Derived from part of the
pool (the first poll where one engine reports while others are still loading), it starts the
run at a fraction of that and leaves growth to climb the rest turnover by turnover. So it
waits until every decode and unified engine is up and reports both figures, and after
``start_wait`` seconds settles for the engines that do, naming the others.
"""

from __future__ import annotations

from workers.core.controller.polls import PollSummary
from workers.core.controller.records import ControllerConfig


class StartCap:
    """Decides when and at what level the controller starts."""

    __slots__ = ("_config", "_first_poll_at")

    def __init__(self, config: ControllerConfig) -> None:
        self._config = config
        self._first_poll_at: float | None = None

    def derive(self, poll: PollSummary, now: float) -> tuple[float, str] | None:
        """The start level and how it was found, once this poll allows one; else None."""
        cfg = self._config
        if cfg.initial_inflight is not None:
            return float(cfg.initial_inflight), f"initial_inflight {cfg.initial_inflight}"
        if self._first_poll_at is None:
            self._first_poll_at = now
        capacity, length = poll.kv_capacity_tokens, poll.max_model_len
        waited = now - self._first_poll_at >= cfg.start_wait
        if not capacity or not length or (poll.unready and not waited):
            return None
        budget = cfg.episode_token_budget
        episode = length if budget is None else min(length, budget)
        detail = f"KV {capacity} tokens / {episode} tokens per episode"
        if poll.unready:
            missing = ", ".join(sorted(poll.unready))
            detail += f"; after {cfg.start_wait:g} s still without {missing}"
        return float(capacity // episode), detail
