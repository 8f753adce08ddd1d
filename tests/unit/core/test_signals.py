"""The overload facts that need memory across polls, shared by every policy."""

from __future__ import annotations

from tests.unit.core.builders import sample
from workers.core.controller.policies.signals import OverloadTracker, classify
from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, Signal


def poll(*samples, at: float = 0.0) -> PollSummary:
    return PollSummary.from_samples(samples or [sample()], at)


def tracker() -> OverloadTracker:
    return OverloadTracker(queue_ratio=0.5, queue_polls=6)


def test_hard_on_any_preemption_since_the_previous_poll() -> None:
    p = poll(sample("a"), sample("b", preemptions=1))
    overload = tracker().update(p)
    assert overload.preempted
    assert classify(overload, p, 0.6) == (Signal.HARD, Cause.PREEMPTION)


def test_hard_on_capacity_queue_above_half_of_running_for_6_consecutive_polls() -> None:
    t = tracker()
    queued = poll(
        sample("a", running=60, waiting=20, waiting_capacity=20),
        sample("b", running=40, waiting=31, waiting_capacity=31),
    )
    for _ in range(5):
        assert not t.update(queued).queue_overload
    overload = t.update(queued)
    assert overload.queue_overload
    assert classify(overload, queued, 0.6) == (Signal.HARD, Cause.QUEUE_OVERLOAD)


def test_a_poll_below_the_queue_ratio_breaks_the_streak() -> None:
    t = tracker()
    queued = poll(sample(running=100, waiting=51, waiting_capacity=51))
    at_ratio = poll(sample(running=100, waiting=50, waiting_capacity=50))
    for _ in range(5):
        t.update(queued)
    assert t.update(at_ratio).queue_streak == 0
    assert not t.update(queued).queue_overload


def test_deferred_waiters_are_not_capacity_queue() -> None:
    t = tracker()
    deferred = poll(sample(running=10, waiting=40, waiting_capacity=0))
    assert [t.update(deferred).queue_over for _ in range(6)] == [False] * 6


def test_forget_queue_drops_the_streak_built_before_a_cut() -> None:
    t = tracker()
    queued = poll(sample(running=100, waiting=60, waiting_capacity=60))
    for _ in range(5):
        t.update(queued)
    t.forget_queue()
    assert t.update(queued).queue_streak == 1


def test_f3_the_queue_streak_does_not_count_while_a_drain_holds() -> None:
    t = tracker()
    queued = poll(sample(running=100, waiting=60, waiting_capacity=60))
    for _ in range(8):
        overload = t.update(queued, draining=True)
    assert (overload.queue_over, overload.queue_streak, overload.queue_overload) == (True, 0, False)
    assert t.update(queued).queue_streak == 1


def test_soft_when_the_same_engine_waits_on_two_consecutive_polls() -> None:
    t = tracker()
    first = poll(sample("a", waiting=2, waiting_capacity=0))
    second = poll(sample("a", waiting=1, waiting_capacity=0))
    assert classify(t.update(first), first, 0.6) == (Signal.CLEAR, Cause.CLEAR)
    assert classify(t.update(second), second, 0.6) == (Signal.SOFT, Cause.WAITING)


def test_waiting_on_different_engines_in_turn_is_not_persistent_waiting() -> None:
    t = tracker()
    t.update(poll(sample("a", waiting=2), sample("b")))
    assert not t.update(poll(sample("a"), sample("b", waiting=2))).waiting_twice


def test_soft_when_kv_usage_passes_0_6_and_clear_otherwise() -> None:
    t = tracker()
    high, low = poll(sample(kv=0.61)), poll(sample(kv=0.6))
    assert classify(t.update(high), high, 0.6) == (Signal.SOFT, Cause.KV_HIGH)
    assert classify(t.update(low), low, 0.6) == (Signal.CLEAR, Cause.CLEAR)


def test_tracker_state_round_trips() -> None:
    t = tracker()
    t.update(poll(sample("a", running=10, waiting=9, waiting_capacity=9)))
    copy = tracker()
    copy.load_json(t.to_json())
    nxt = poll(sample("a", running=10, waiting=9, waiting_capacity=9))
    assert copy.update(nxt) == t.update(nxt)
