"""Overload signals that need memory across polls: preemptions, the capacity-queue streak,
and engines that keep requests waiting.

Shared by the policies so that "queue overload" and "waiting on consecutive polls" mean the same
thing in the reference, in the fixed cap's gauges and in pacer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, Signal
from workers.core.validation import stored_count


@dataclass(frozen=True, slots=True)
class Overload:
    """The overload facts of one poll, given the polls before it."""

    preempted: bool  # some engine preempted since the previous poll
    queue_over: bool  # capacity queue above the share of running on this poll
    queue_streak: int  # consecutive polls, up to this one, with queue_over
    queue_overload: bool  # queue_streak reached the persistence bound
    waiting_twice: bool  # some engine had waiting requests on this poll and the previous one

    @property
    def hard(self) -> bool:
        return self.preempted or self.queue_overload

    @property
    def hard_cause(self) -> Cause:
        return Cause.PREEMPTION if self.preempted else Cause.QUEUE_OVERLOAD


class OverloadTracker:
    """Keeps the queue streak and the previous poll's waiting engines.

    The streak does not count while a drain holds: a backlog that predates a cut outlives it
    for a while, and counting it would give a second, escalated cut the moment the drain
    releases. Only polls after the release can make a new case for queue overload.
    """

    def __init__(self, *, queue_ratio: float, queue_polls: int) -> None:
        self._queue_ratio = queue_ratio
        self._queue_polls = queue_polls
        self._queue_streak = 0
        self._waiting_before: frozenset[str] = frozenset()

    def update(self, poll: PollSummary, *, draining: bool = False) -> Overload:
        queue_over = poll.waiting_capacity > self._queue_ratio * poll.running
        self._queue_streak = self._queue_streak + 1 if queue_over and not draining else 0
        waiting_twice = bool(poll.waiting_engines & self._waiting_before)
        self._waiting_before = poll.waiting_engines
        return Overload(
            preempted=poll.preemptions > 0,
            queue_over=queue_over,
            queue_streak=self._queue_streak,
            queue_overload=self._queue_streak >= self._queue_polls,
            waiting_twice=waiting_twice,
        )

    def forget_queue(self) -> None:
        """Drop the streak after a cut: queue polls from before it must not justify another."""
        self._queue_streak = 0

    def to_json(self) -> dict[str, Any]:
        return {"queue_streak": self._queue_streak, "waiting": sorted(self._waiting_before)}

    def load_json(self, data: Mapping[str, Any]) -> None:
        waiting = data["waiting"]
        if not isinstance(waiting, list) or not all(isinstance(e, str) for e in waiting):
            raise ValueError(f"waiting must be a list of engine ids, got {waiting!r}")
        self._queue_streak = stored_count(data, "queue_streak")
        self._waiting_before = frozenset(waiting)


def classify(overload: Overload, poll: PollSummary, soft_kv_usage: float) -> tuple[Signal, Cause]:
    """The reference's signal: hard on preemption or queue overload, soft on waiting or KV."""
    if overload.hard:
        return Signal.HARD, overload.hard_cause
    if overload.waiting_twice:
        return Signal.SOFT, Cause.WAITING
    if poll.max_kv_usage > soft_kv_usage:
        return Signal.SOFT, Cause.KV_HIGH
    return Signal.CLEAR, Cause.CLEAR


def overload_figures(overload: Overload, poll: PollSummary) -> dict[str, float]:
    """The numbers every reading reports, whatever the policy."""
    return {
        "max_kv_usage": poll.max_kv_usage,
        "running": poll.running,
        "waiting": poll.waiting,
        "waiting_capacity": poll.waiting_capacity,
        "preemptions": poll.preemptions,
        "queue_streak": overload.queue_streak,
    }
