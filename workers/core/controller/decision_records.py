"""How the controller writes its decisions: the figures every record carries, the reason text
of a policy's change (naming the operator's pin when one holds the real cap), and growth kept
to a stream a person can read."""

from __future__ import annotations

from dataclasses import dataclass

from workers.core.controller.policies.base import Reading
from workers.core.decisions import Cause, Decision, DecisionKind, Signal, change_reason


@dataclass(frozen=True, slots=True)
class Moment:
    """The controller at the instant of a decision: what every record reports besides its
    own change."""

    at: float
    reading: Reading | None  # the last usable poll's reading; None before one, or when blind
    inflight: int
    turnover: float
    growth: float
    policy_cap: int  # the policy's cap now
    pin_cap: int | None  # the operator's cap while a pin holds it
    ceiling: int | None = None  # its part of a pool other runs share; None while alone

    def record(
        self,
        kind: DecisionKind,
        cause: Cause,
        cap_before: int,
        reason: str,
        *,
        shed: int = 0,
        alert: bool = False,
        shadow_before: int | None = None,
    ) -> Decision:
        """Any decision. While pinned, ``cap_*`` is the pin's and ``shadow_*`` the policy's;
        ``shadow_before`` defaults to the policy's cap now (a decision that did not move it)."""
        pinned = self.pin_cap is not None
        reading = self.reading
        figures: dict[str, float] = dict(reading.figures) if reading is not None else {}
        figures.update(inflight=self.inflight, turnover=self.turnover, growth=self.growth)
        if self.ceiling is not None:  # the run page draws it beside the cap
            figures["ceiling"] = self.ceiling
        return Decision(
            at=self.at,
            kind=kind,
            cause=cause,
            signal=Signal.UNKNOWN if reading is None else reading.signal,
            cap_before=cap_before,
            cap_after=self.policy_cap if self.pin_cap is None else self.pin_cap,
            reason=reason,
            shed=shed,
            shadow_before=(self.policy_cap if shadow_before is None else shadow_before)
            if pinned
            else None,
            shadow_after=self.policy_cap if pinned else None,
            alert=alert,
            figures=figures,
        )

    def policy_record(
        self,
        kind: DecisionKind,
        cause: Cause,
        detail: str,
        *,
        before: int | None = None,
        shed: int = 0,
        alert: bool = False,
    ) -> Decision:
        """A change of the policy's cap from ``before`` (default: unchanged) to now. The
        reason speaks of the policy's cap, prefixed by the pin when one holds the real cap."""
        policy_before = self.policy_cap if before is None else before
        reason = change_reason(policy_before, self.policy_cap, cause, detail)
        if self.pin_cap is None:
            return self.record(kind, cause, policy_before, reason, shed=shed, alert=alert)
        return self.record(
            kind,
            cause,
            self.pin_cap,
            f"Pinned at {self.pin_cap} by operator; policy: {reason}",
            shed=shed,
            alert=alert,
            shadow_before=policy_before,
        )


class GrowthLog:
    """Merges the cap's growth steps into at most one GROW record per poll interval.

    Growth moves the cap on every completion, which at cap 1000 is a couple of hundred integer
    steps per turnover: far too many records for a person, a table or a websocket. So the first
    step of an interval is recorded at once (a change shows without delay), and the steps after
    it wait: the next poll records them as one, or, when another decision comes first, they are
    recorded just before it, so that every record starts where the one before it ended. An
    operator's command, whose decision comes alone, takes them in and says so.
    """

    __slots__ = ("_recorded", "_start")

    def __init__(self) -> None:
        self._start: int | None = None  # the cap unrecorded growth started from
        self._recorded = False  # this interval has its growth record

    def new_interval(self) -> None:
        self._recorded = False

    def grew(self, before: int) -> bool:
        """The cap grew from ``before``; True when this step is to be recorded now."""
        if self._start is None:
            self._start = before
        return not self._recorded

    def record(self, moment: Moment) -> tuple[Decision, ...]:
        """The growth not yet on record, as one GROW decision; it is this interval's record."""
        start = self.take()
        if start is None or start == moment.policy_cap:
            return ()
        detail = f"x{moment.growth:.3f} per turnover, {moment.inflight} in flight"
        return (moment.policy_record(DecisionKind.GROW, Cause.CLEAR, detail, before=start),)

    def take(self) -> int | None:
        """The start of the growth not yet on record, now accounted for; None if none."""
        start, self._start = self._start, None
        if start is not None:
            self._recorded = True
        return start
