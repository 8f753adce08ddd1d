"""The cut and the trim hysteresis, shared by the adaptive policies so they cannot drift apart.

A cut is multiplicative on the pool, sized in pool units (idle multi-turn episodes included):
``preemption_factor`` after a preemption, ``queue_factor`` after queue overload, and
``escalated_factor`` when it comes within ``escalation_polls`` of a drain release, because
pressure that returns that fast means the last cut was short.
"""

from __future__ import annotations

from typing import Protocol

from workers.core.controller.policies.base import PoolView, Proposal
from workers.core.controller.policies.signals import Overload, OverloadTracker
from workers.core.decisions import DecisionKind


class CutSettings(Protocol):
    """The fields of a policy's config that size its cuts."""

    @property
    def preemption_factor(self) -> float: ...

    @property
    def queue_factor(self) -> float: ...

    @property
    def escalated_factor(self) -> float: ...

    @property
    def escalation_polls(self) -> int: ...


def cut_proposal(
    overload: Overload, pool: PoolView, settings: CutSettings, tracker: OverloadTracker
) -> Proposal:
    """The cut for a hard poll; the queue streak behind it is spent."""
    since = pool.polls_since_release
    escalated = since is not None and since <= settings.escalation_polls
    if escalated:
        factor = settings.escalated_factor
    elif overload.preempted:
        factor = settings.preemption_factor
    else:
        factor = settings.queue_factor
    tracker.forget_queue()
    detail = f"inflight {pool.inflight} x {factor:.3g}" + (" (escalated)" if escalated else "")
    return Proposal(DecisionKind.CUT, factor * pool.inflight, True, overload.hard_cause, detail)


class TrimRest:
    """Hysteresis between trims: after one, no other for ``polls`` polls.

    A trim takes effect only as completions drain the pool, so the polls right after it still
    show the pressure it answered; trimming on them again would answer it twice.
    """

    __slots__ = ("polls", "since")

    def __init__(self, polls: int) -> None:
        self.polls = polls
        self.since: int | None = None  # polls since the last trim; None before the first

    @property
    def rested(self) -> bool:
        return self.since is None or self.since >= self.polls

    def tick(self) -> None:
        """One more poll read."""
        if self.since is not None:
            self.since += 1

    def trimmed(self) -> None:
        self.since = 0
