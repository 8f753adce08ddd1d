"""The dispatcher against a hand-driven fake engine: permits, routing, off-policy drops,
endings and lifecycle (pacing: ``test_dispatcher_pacing``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.unit.core.dispatch_harness import (
    EVAL,
    TRAIN,
    UNPACED,
    FakeEngines,
    MakeHarness,
    started,
)
from workers.core.clock import ManualClock
from workers.core.dispatch.dispatcher import Dispatcher
from workers.core.dispatch.episodes import CancelReason, EpisodeTicket, FinishedEpisode, GroupSpec
from workers.core.dispatch.permits import PermitOutcome
from workers.core.dispatch.records import DispatcherConfig
from workers.core.dispatch.tallies import Tally, TallyKey

# -- permits and the cap ---------------------------------------------------------------------


async def test_one_permit_per_episode_shared_by_train_and_eval(make: MakeHarness) -> None:
    h = make(cap=6)
    h.submit("t", 4, TRAIN)
    h.submit("e", 4, EVAL)
    await h.settle()
    stats = h.dispatcher.stats()
    assert (stats.inflight, stats.inflight_train, stats.inflight_eval) == (6, 4, 2)
    assert stats.pending_episodes == 2


async def test_lowering_the_cap_cancels_nothing_and_only_stops_admission(make: MakeHarness) -> None:
    h = make(cap=8)
    h.submit("g0")
    h.submit("g1")
    h.submit("g2")
    await h.settle()
    h.dispatcher.set_cap(2)
    await h.settle()
    assert (h.inflight, h.engines.aborted) == (8, [])
    h.engines.finish("g0", 0, 1, 2, 3)
    await h.settle()
    assert h.inflight == 4
    h.engines.finish("g1", 0, 1, 2)
    await h.settle()
    assert h.inflight == 2  # one left, below the cap again: admission resumes up to the cap
    assert h.engines.live("g2") == [0]


async def test_f9_a_long_episode_keeps_its_permit(make: MakeHarness) -> None:
    h = make(cap=4)
    h.submit("g0", 1)
    await h.advance(10 * 3600.0)
    assert h.inflight == 1
    h.engines.finish("g0", 0)
    await h.settle()
    assert (h.inflight, h.finished[0].started_at, h.finished[0].finished_at) == (0, 0.0, 36000.0)


# -- scheduling and routing ------------------------------------------------------------------


async def test_started_groups_are_finished_before_new_ones_are_opened(make: MakeHarness) -> None:
    h = make(cap=4)
    h.submit("g0", 3)
    h.submit("g1", 3)
    h.submit("g2", 3)
    await h.settle()
    assert (h.engines.live("g0"), h.engines.live("g1")) == ([0, 1, 2], [0])
    h.engines.finish("g0", 0, 1)
    await h.settle()
    assert (h.engines.live("g1"), h.engines.live("g2")) == ([0, 1, 2], [])


async def test_each_group_runs_on_one_engine_the_least_loaded_healthy_one(
    make: MakeHarness,
) -> None:
    h = make(cap=100, engines=("a", "b"))
    h.submit("g0", 4)
    h.submit("g1", 2)
    h.submit("g2", 4)
    await h.settle()
    where = h.engines.engine_of
    assert {where[("g0", i)] for i in range(4)} == {"a"}
    assert {where[("g1", i)] for i in range(2)} == {"b"}
    assert {where[("g2", i)] for i in range(4)} == {"b"}  # b had 2 in flight, a had 4


async def test_a_group_whose_engine_left_continues_on_a_healthy_one(make: MakeHarness) -> None:
    h = make(cap=2, engines=("a", "b"))
    h.submit("g0", 4)
    await h.settle()
    h.dispatcher.set_engines(["b"])
    h.engines.finish("g0", 0, 1)
    await h.settle()
    assert h.engines.engine_of[("g0", 2)] == "b"


async def test_no_healthy_engine_means_no_admission_until_one_returns(make: MakeHarness) -> None:
    h = make(cap=8, engines=())
    h.submit("g0")
    await h.settle()
    assert h.inflight == 0
    h.dispatcher.set_engines(["a"])
    await h.settle()
    assert h.inflight == 4


# -- off-policy drops ------------------------------------------------------------------------


async def test_groups_older_than_max_off_policy_steps_are_dropped(make: MakeHarness) -> None:
    h = make(cap=4, config=DispatcherConfig(max_off_policy_steps=2, pacing=UNPACED.pacing))
    h.submit("v0", 4, version=0)
    h.submit("v1", 4, version=1)
    h.submit("eval0", 4, EVAL, version=0)
    await h.settle()
    assert h.dispatcher.advance_policy(3) == ("v0",)
    await h.settle()
    assert sorted(h.engines.aborted) == [("v0", i) for i in range(4)]
    assert {f.cancel_reason for f in h.finished} == {CancelReason.OFF_POLICY}
    await h.advance(5.0)  # the drop refunded no admission: the next window takes eval0...
    assert h.engines.live("eval0") == [0, 1, 2, 3]  # ...new eval groups before new train ones
    assert h.engines.live("v1") == []
    assert h.submit("late", 4, version=0) is False


# -- endings, counts, lifecycle --------------------------------------------------------------


async def test_finished_episodes_carry_outcome_result_and_the_pool_they_left(
    make: MakeHarness,
) -> None:
    h = make(cap=100)
    h.submit("g0", 2)
    await h.settle()
    h.engines.finish("g0", 0, tokens=77)
    await h.settle()
    h.engines.fail("g0", 1)
    await h.settle()
    done, failed = h.finished
    assert (done.outcome, done.result, done.pool, done.engine_id) == (
        PermitOutcome.COMPLETED,
        77,
        2,
        "a",
    )
    assert (failed.outcome, failed.pool, str(failed.error)) == (
        PermitOutcome.FAILED,
        1,
        "engine said 500",
    )


async def test_a_failed_episode_refunds_no_admission(make: MakeHarness) -> None:
    h = make(cap=100, config=DispatcherConfig())
    for n in range(30):
        h.submit(f"g{n}")
    await h.settle()
    h.engines.fail("g0", 0)
    await h.settle()
    assert h.inflight == 9


async def test_counts_per_kind_env_engine_and_gauges(make: MakeHarness) -> None:
    h = make(cap=100, engines=("a", "b"))
    h.submit("t0", 4)
    h.submit("e0", 2, EVAL)
    await h.settle()
    h.engines.finish("t0", 0)
    h.engines.fail("t0", 1)
    await h.settle()
    h.dispatcher.shed(1)
    await h.settle()
    stats = h.dispatcher.stats()
    assert stats.tallies == {
        TallyKey(TRAIN, "math", "a"): Tally(admitted=4, completed=1, failed=1, shed=2),
        TallyKey(EVAL, "math", "b"): Tally(admitted=2),
    }
    assert (stats.inflight, stats.inflight_eval, stats.inflight_by_engine) == (2, 2, {"b": 2})
    assert stats.train_by_engine == {}  # what is left on engines is the eval group
    assert (stats.healthy_engines, stats.open_groups, stats.cap) == (2, 1, 100)


async def test_aclose_cancels_everything_and_refuses_new_work(make: MakeHarness) -> None:
    h = make(cap=100)
    await started(2, h)
    await h.dispatcher.aclose()
    assert h.inflight == 0
    assert {f.cancel_reason for f in h.finished} == {CancelReason.CLOSED}
    with pytest.raises(RuntimeError, match="closed"):
        h.submit("late")


async def test_aclose_waits_for_the_pacing_timer_it_cancels(make: MakeHarness) -> None:
    h = make(cap=100, config=DispatcherConfig())
    for n in range(10):
        h.submit(f"g{n}")
    await h.settle()
    h.dispatcher.shed(100)
    await h.settle()
    assert h.inflight == 0  # the window is spent: the pacing timer waits for it to slide
    await h.dispatcher.aclose()
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_an_episode_cancelled_twice_is_counted_under_the_first_reason(
    make: MakeHarness,
) -> None:
    h = make(cap=100)
    h.submit("g0", 2)
    await h.settle()
    h.dispatcher.shed(1)
    await h.dispatcher.aclose()
    assert {f.cancel_reason for f in h.finished} == {CancelReason.SHED}
    assert h.dispatcher.stats().tallies == {TallyKey(TRAIN, "math", "a"): Tally(admitted=2, shed=2)}


async def test_an_episode_whose_call_raises_at_once_fails_and_returns_its_permit() -> None:
    engines = FakeEngines()
    finished: list[FinishedEpisode[int, int]] = []

    def run_episode(ticket: EpisodeTicket[int], engine: str) -> Any:
        if ticket.payload == 1:
            raise ValueError("no such environment")
        return engines(ticket, engine)

    clock = ManualClock()
    dispatcher: Dispatcher[int, int] = Dispatcher(
        run_episode=run_episode,
        on_finished=finished.append,
        clock=clock,
        cap=4,
        config=UNPACED,
        engines=("a",),
    )
    dispatcher.submit(GroupSpec("g0", TRAIN, "math", 0, (0, 1, 2, 3)))
    dispatcher.submit(GroupSpec("g1", TRAIN, "math", 0, (0, 0)))
    for _ in range(6):
        await asyncio.sleep(0)
    (failed,) = finished
    assert (failed.ticket.index, failed.outcome, str(failed.error)) == (
        1,
        PermitOutcome.FAILED,
        "no such environment",
    )
    assert dispatcher.inflight == 3  # its permit came back; a failure buys no instant retry
    clock.advance(5.0)
    for _ in range(6):
        await asyncio.sleep(0)
    assert sorted(engines.running) == [("g0", 0), ("g0", 2), ("g0", 3), ("g1", 0)]
    assert dispatcher.stats().tallies == {TallyKey(TRAIN, "math", "a"): Tally(admitted=5, failed=1)}
    await dispatcher.aclose()


def test_outside_a_running_event_loop_a_group_is_refused_and_nothing_is_lost() -> None:
    engines = FakeEngines()
    dispatcher: Dispatcher[int, int] = Dispatcher(
        run_episode=engines,
        on_finished=lambda _: None,
        clock=ManualClock(),
        cap=4,
        config=UNPACED,
        engines=("a",),
    )
    spec = GroupSpec("g0", TRAIN, "math", 0, (0, 1))
    with pytest.raises(RuntimeError, match="running event loop"):
        dispatcher.submit(spec)
    assert (dispatcher.inflight, dispatcher.stats().open_groups) == (0, 0)

    async def later() -> None:
        assert dispatcher.submit(spec)
        await asyncio.sleep(0)
        assert sorted(engines.running) == [("g0", 0), ("g0", 1)]
        await dispatcher.aclose()

    asyncio.run(later())


async def test_bad_input_is_refused(make: MakeHarness) -> None:
    h = make(cap=4)
    h.submit("g0")
    with pytest.raises(ValueError, match="already queued"):
        h.submit("g0")
    with pytest.raises(ValueError, match="cap must be"):
        h.dispatcher.set_cap(-1)
    with pytest.raises(ValueError, match="shed count"):
        h.dispatcher.shed(-1)
    h.dispatcher.advance_policy(3)
    with pytest.raises(ValueError, match="went back"):
        h.dispatcher.advance_policy(2)
    with pytest.raises(ValueError, match="no episodes"):
        GroupSpec("empty", TRAIN, "math", 0, ())
    await h.dispatcher.aclose()
