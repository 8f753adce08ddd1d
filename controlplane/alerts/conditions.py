"""Which alert conditions hold now: facts about a run in, conditions out.

Pure (no Django, no clock of its own), so the rules are tested alone and the watch
(``watch.py``) only gathers facts and acts on the answer. A condition holds or does not at
each look; the watch turns that into episodes (one notification when a condition starts to
hold, one "resolved" when it stops), so nothing here remembers anything between looks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum


class AlertKind(StrEnum):
    PREEMPTION_STORM = "preemption_storm"  # preemptions/s over a threshold for N polls
    ENGINE_DOWN = "engine_down"  # an engine stale or down for N seconds
    PIN_EXPIRING = "pin_expiring"  # a pin that lapses within N minutes
    RUN_FAILED = "run_failed"
    RUN_COMPLETED = "run_completed"
    RUN_IDLE = "run_idle"  # running, no step for N minutes
    RECONCILE = "reconcile"  # the run's reconcile alert (requests no episode owns)

    @property
    def ends(self) -> bool:
        """A run's end happens once: it is told, never resolved."""
        return self in (AlertKind.RUN_FAILED, AlertKind.RUN_COMPLETED)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """A rule's limits, with the defaults a new rule gets."""

    # One preemption a second is a pool recomputing contexts all the time; three polls (15 s
    # at the default 5 s) is longer than a cut takes to bite, so the controller had its chance.
    storm_preemptions_per_s: float = 1.0
    storm_polls: int = 3
    # A minute: past the 30 s an engine's numbers may lag before a run freezes growth, and
    # longer than a restart of vLLM with a small model.
    engine_down_s: float = 60.0
    pin_expiring_s: float = 300.0  # five minutes' notice to renew a pin
    idle_s: float = 1800.0  # thirty minutes without a step: longer than any sane step
    # A reconcile alert within this long counts as the condition holding (it is repeated
    # every few polls while it lasts).
    reconcile_window_s: float = 60.0


@dataclass(frozen=True, slots=True)
class Poll:
    """One engine's sample of a run at a poll."""

    at: datetime
    engine: str
    health: str  # "up", "stale", "down"
    preemptions: int  # in the poll's interval
    interval_s: float | None


@dataclass(frozen=True, slots=True)
class RunFacts:
    run_id: int
    name: str
    state: str
    error: str = ""
    step: int = 0
    started_at: datetime | None = None
    last_step_at: datetime | None = None
    polls: Sequence[Poll] = ()  # the recent ones, any order
    pin_expires_at: datetime | None = None
    pin_cap: int | None = None
    last_reconcile_at: datetime | None = None
    last_reconcile_reason: str = ""


@dataclass(frozen=True, slots=True)
class Condition:
    kind: AlertKind
    run_id: int
    key: str  # what within the run it is about (an engine), "" for the run itself
    summary: str  # one sentence a person reads in a chat
    engines: tuple[str, ...] = ()
    figures: dict[str, float | int | str] = field(default_factory=dict)


def conditions(facts: RunFacts, limits: Thresholds, now: datetime) -> list[Condition]:
    """Every condition that holds for the run now."""
    found: list[Condition] = []
    name = f"run {facts.run_id} ({facts.name})"
    if facts.state == "failed":
        reason = facts.error or "no reason given"
        found.append(_run(AlertKind.RUN_FAILED, facts, f"{name} failed: {reason}"))
    if facts.state == "completed":
        found.append(_run(AlertKind.RUN_COMPLETED, facts, f"{name} completed {facts.step} steps"))
    if facts.state != "running":
        return found
    found += _storms(facts, limits, name)
    found += _engines_down(facts, limits, now, name)
    since = facts.last_step_at or facts.started_at
    if since is not None and now - since >= timedelta(seconds=limits.idle_s):
        minutes = (now - since).total_seconds() / 60
        what = f"step {facts.step}" if facts.last_step_at else "its start"
        found.append(
            _run(
                AlertKind.RUN_IDLE,
                facts,
                f"{name} has written no step for {minutes:.0f} min (since {what})",
                idle_s=round((now - since).total_seconds()),
            )
        )
    expires = facts.pin_expires_at
    if expires is not None and now <= expires <= now + timedelta(seconds=limits.pin_expiring_s):
        left = (expires - now).total_seconds()
        found.append(
            _run(
                AlertKind.PIN_EXPIRING,
                facts,
                f"{name}: the pin at cap {facts.pin_cap} lapses in {left / 60:.1f} min",
                seconds_left=round(left),
                cap=facts.pin_cap or 0,
            )
        )
    seen = facts.last_reconcile_at
    if seen is not None and now - seen <= timedelta(seconds=limits.reconcile_window_s):
        found.append(_run(AlertKind.RECONCILE, facts, f"{name}: {facts.last_reconcile_reason}"))
    return found


def _run(kind: AlertKind, facts: RunFacts, summary: str, **figures: float | int) -> Condition:
    return Condition(kind, facts.run_id, "", summary, figures={"step": facts.step, **figures})


def _by_engine(polls: Sequence[Poll]) -> dict[str, list[Poll]]:
    """Each engine's polls, newest first."""
    engines: dict[str, list[Poll]] = {}
    for poll in sorted(polls, key=lambda p: p.at, reverse=True):
        engines.setdefault(poll.engine, []).append(poll)
    return engines


def _storms(facts: RunFacts, limits: Thresholds, name: str) -> list[Condition]:
    found = []
    for engine, polls in _by_engine(facts.polls).items():
        last = polls[: limits.storm_polls]
        if len(last) < limits.storm_polls:
            continue
        rates = [p.preemptions / p.interval_s for p in last if p.interval_s]
        if len(rates) < limits.storm_polls or min(rates) <= limits.storm_preemptions_per_s:
            continue
        mean = sum(rates) / len(rates)
        summary = (
            f"{name}: {engine} preempts {mean:.1f} requests/s "
            f"(over {limits.storm_preemptions_per_s:g}/s for {len(rates)} polls)"
        )
        figures = {"preemptions_per_s": round(mean, 2), "polls": len(rates)}
        found.append(
            Condition(AlertKind.PREEMPTION_STORM, facts.run_id, engine, summary, (engine,), figures)
        )
    return found


def _engines_down(facts: RunFacts, limits: Thresholds, now: datetime, name: str) -> list[Condition]:
    found = []
    for engine, polls in _by_engine(facts.polls).items():
        if polls[0].health == "up":
            continue
        since = polls[0].at
        for poll in polls[1:]:
            if poll.health == "up":
                break
            since = poll.at
        seconds = (now - since).total_seconds()
        if seconds < limits.engine_down_s:
            continue
        summary = f"{name}: {engine} has been {polls[0].health} for {seconds:.0f} s"
        figures = {"seconds": round(seconds), "health": polls[0].health}
        found.append(
            Condition(AlertKind.ENGINE_DOWN, facts.run_id, engine, summary, (engine,), figures)
        )
    return found
