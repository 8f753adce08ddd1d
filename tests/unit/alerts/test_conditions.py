"""The alert conditions alone: facts in, the conditions that hold out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from controlplane.alerts.conditions import AlertKind, Poll, RunFacts, Thresholds, conditions

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
LIMITS = Thresholds()


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def running(**facts: object) -> RunFacts:
    base: dict[str, object] = {
        "run_id": 7,
        "name": "demo",
        "state": "running",
        "step": 3,
        "started_at": ago(120),
        "last_step_at": ago(10),
    }
    return RunFacts(**{**base, **facts})  # type: ignore[arg-type]


def kinds(facts: RunFacts, limits: Thresholds = LIMITS) -> list[AlertKind]:
    return [c.kind for c in conditions(facts, limits, NOW)]


def polls(engine: str, *pairs: tuple[str, int], every: float = 5.0) -> list[Poll]:
    """One poll per (health, preemptions) pair, the last pair the newest."""
    count = len(pairs)
    return [
        Poll(ago((count - 1 - i) * every), engine, health, preempted, every)
        for i, (health, preempted) in enumerate(pairs)
    ]


def test_a_quiet_running_run_holds_no_condition() -> None:
    assert kinds(running(polls=polls("e0", ("up", 0), ("up", 1), ("up", 0)))) == []


def test_a_preemption_storm_needs_every_one_of_its_last_polls_over_the_rate() -> None:
    storm = polls("e0", ("up", 20), ("up", 30), ("up", 25))  # 4, 6, 5 a second
    (found,) = conditions(running(polls=storm), LIMITS, NOW)
    assert found.kind is AlertKind.PREEMPTION_STORM and found.key == "e0"
    assert found.engines == ("e0",) and found.figures["preemptions_per_s"] == 5.0
    assert "e0 preempts 5.0 requests/s (over 1/s for 3 polls)" in found.summary
    one_calm = polls("e0", ("up", 20), ("up", 2), ("up", 25))
    assert kinds(running(polls=one_calm)) == []
    too_few = polls("e0", ("up", 20), ("up", 30))
    assert kinds(running(polls=too_few)) == []


def test_an_engine_down_counts_from_the_first_poll_of_its_streak() -> None:
    down = [
        Poll(ago(90), "e1", "up", 0, 5.0),
        Poll(ago(70), "e1", "down", 0, 5.0),
        Poll(ago(5), "e1", "stale", 0, 5.0),
    ]
    (found,) = conditions(running(polls=down), LIMITS, NOW)
    assert found.kind is AlertKind.ENGINE_DOWN and found.key == "e1"
    assert found.figures == {"seconds": 70, "health": "stale"}
    assert kinds(running(polls=down), Thresholds(engine_down_s=75)) == []
    back = [*down, Poll(NOW, "e1", "up", 0, 5.0)]
    assert kinds(running(polls=back)) == []


def test_a_pin_is_told_within_its_notice_and_not_after_it_lapsed() -> None:
    soon = running(pin_expires_at=NOW + timedelta(seconds=120), pin_cap=40)
    (found,) = conditions(soon, LIMITS, NOW)
    assert found.kind is AlertKind.PIN_EXPIRING and "cap 40 lapses in 2.0 min" in found.summary
    assert kinds(running(pin_expires_at=NOW + timedelta(seconds=400), pin_cap=40)) == []
    assert kinds(running(pin_expires_at=ago(1), pin_cap=40)) == []


def test_a_run_with_no_step_for_its_idle_time_is_idle() -> None:
    assert kinds(running(last_step_at=ago(1800))) == [AlertKind.RUN_IDLE]
    assert kinds(running(last_step_at=ago(1799))) == []
    fresh = running(last_step_at=None, started_at=ago(2000))
    (found,) = conditions(fresh, LIMITS, NOW)
    assert "no step for 33 min (since its start)" in found.summary


def test_ends_are_told_and_nothing_else_of_an_ended_run() -> None:
    storm = polls("e0", ("up", 20), ("up", 30), ("up", 25))
    failed = running(state="failed", error="no engine usable for 600 s", polls=storm)
    (found,) = conditions(failed, LIMITS, NOW)
    assert found.kind is AlertKind.RUN_FAILED and found.summary.endswith("for 600 s")
    assert kinds(running(state="completed", step=100)) == [AlertKind.RUN_COMPLETED]
    assert kinds(running(state="paused", last_step_at=ago(5000))) == []
    assert AlertKind.RUN_FAILED.ends and not AlertKind.ENGINE_DOWN.ends


def test_a_reconcile_alert_holds_within_its_window() -> None:
    seen = running(last_reconcile_at=ago(30), last_reconcile_reason="Engines hold 99 requests")
    (found,) = conditions(seen, LIMITS, NOW)
    assert found.kind is AlertKind.RECONCILE and found.summary.endswith("hold 99 requests")
    assert kinds(running(last_reconcile_at=ago(61), last_reconcile_reason="x")) == []
