"""The dispatcher against a hand-driven fake engine: permits, pacing, routing, shedding."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.core.clock import ManualClock
from workers.core.dispatch_records import DispatcherConfig
from workers.core.dispatcher import Dispatcher
from workers.core.episodes import CancelReason, EpisodeTicket, FinishedEpisode, GroupSpec
from workers.core.pacing import PacingConfig
from workers.core.permits import EpisodeKind, PermitOutcome
from workers.core.tallies import Tally, TallyKey

TRAIN, EVAL = EpisodeKind.TRAIN, EpisodeKind.EVAL
UNPACED = DispatcherConfig(pacing=PacingConfig(cap_fraction=1.0))


class FakeEngines:
    """Episodes that run until the test finishes or fails them; records aborts."""

    def __init__(self) -> None:
        self.running: dict[tuple[str, int], asyncio.Future[int]] = {}
        self.engine_of: dict[tuple[str, int], str] = {}
        self.aborted: list[tuple[str, int]] = []

    async def __call__(self, ticket: EpisodeTicket[int], engine: str) -> int:
        key = (ticket.group_id, ticket.index)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.running[key] = future
        self.engine_of[key] = engine
        try:
            return await future
        except asyncio.CancelledError:
            self.aborted.append(key)  # where the real client closes its HTTP request
            raise
        finally:
            del self.running[key]

    def finish(self, group: str, *indices: int, tokens: int = 10) -> None:
        for index in indices:
            self.running[(group, index)].set_result(tokens)

    def fail(self, group: str, index: int) -> None:
        self.running[(group, index)].set_exception(RuntimeError("engine said 500"))

    def live(self, group: str) -> list[int]:
        return sorted(i for g, i in self.running if g == group)


class Harness:
    def __init__(
        self, cap: int, config: DispatcherConfig = UNPACED, engines: tuple[str, ...] = ("a",)
    ) -> None:
        self.clock = ManualClock()
        self.engines = FakeEngines()
        self.finished: list[FinishedEpisode[int, int]] = []
        self.dispatcher: Dispatcher[int, int] = Dispatcher(
            run_episode=self.engines,
            on_finished=self.finished.append,
            clock=self.clock,
            cap=cap,
            config=config,
            engines=engines,
        )

    def submit(self, group: str, size: int = 4, kind: EpisodeKind = TRAIN, version: int = 0):
        spec = GroupSpec(group, kind, "math", version, tuple(range(size)))
        return self.dispatcher.submit(spec)

    async def settle(self) -> None:
        for _ in range(6):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.settle()

    @property
    def inflight(self) -> int:
        return self.dispatcher.inflight


MakeHarness = Callable[..., Harness]


@pytest.fixture
async def make() -> AsyncIterator[MakeHarness]:
    """Harnesses whose dispatchers are closed after the test, pacing timers included."""
    made: list[Harness] = []

    def factory(*args: Any, **kwargs: Any) -> Harness:
        made.append(Harness(*args, **kwargs))
        return made[-1]

    yield factory
    for harness in made:
        await harness.dispatcher.aclose()


async def started(count_groups: int, h: Harness, size: int = 4, gap: float = 1.0) -> None:
    for n in range(count_groups):
        h.submit(f"g{n}", size)
        await h.advance(gap)


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


# -- pacing ----------------------------------------------------------------------------------


async def test_pacing_allows_a_tenth_of_the_cap_net_per_window(make: MakeHarness) -> None:
    h = make(cap=100, config=DispatcherConfig())
    for n in range(30):
        h.submit(f"g{n}")
    await h.settle()
    assert h.inflight == 10
    await h.advance(4.9)
    assert h.inflight == 10
    await h.advance(0.1)  # the window slid: the dispatcher's own timer refills
    assert h.inflight == 20


async def test_a_natural_completion_refunds_its_admission_but_a_cancellation_does_not(
    make: MakeHarness,
) -> None:
    h = make(cap=100, config=DispatcherConfig())
    for n in range(30):
        h.submit(f"g{n}")
    await h.settle()
    h.engines.finish("g0", 0, 1)
    await h.settle()
    assert h.inflight == 10  # both replaced at once
    report = h.dispatcher.shed(4)
    await h.settle()
    assert report.cancelled == 4
    assert h.inflight == 6  # nothing replaced the shed episodes
    assert (h.dispatcher.stats().pacing_paid, h.dispatcher.stats().pacing_credits) == (10, 0)


async def test_f16_refill_after_a_barrier_reaches_the_cap_in_one_go(make: MakeHarness) -> None:
    h = make(cap=64, config=DispatcherConfig())
    for n in range(16):
        h.submit(f"a{n}")
    for _ in range(10):
        await h.advance(5.0)
    assert h.inflight == 64
    for n in range(16):
        h.engines.finish(f"a{n}", 0, 1, 2, 3)
    await h.settle()
    assert h.inflight == 0  # the barrier: the step waits for the trainer
    for n in range(16):
        h.submit(f"b{n}")
    assert h.inflight == 64  # same instant, no clock advance: all 16 groups at once


async def test_completions_above_the_cap_bank_no_credit_for_a_later_raise(
    make: MakeHarness,
) -> None:
    h = make(cap=100, config=DispatcherConfig())
    for n in range(40):
        h.submit(f"g{n}")
    for _ in range(10):
        await h.advance(5.0)
    assert h.inflight == 100
    await h.advance(5.0)  # the last paid admissions left the window
    h.dispatcher.set_cap(50)
    for n in range(12):
        h.engines.finish(f"g{n}", 0, 1, 2, 3)
    h.engines.finish("g12", 0, 1)
    await h.settle()
    assert h.inflight == 50  # drained to the cap: none of these slots was refilled
    h.dispatcher.set_cap(100)
    await h.settle()
    assert h.inflight == 60  # one window's budget, not a burst paid by those 50 completions


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


# -- shedding --------------------------------------------------------------------------------


async def test_shed_cancels_whole_train_groups_youngest_first_and_aborts_their_requests(
    make: MakeHarness,
) -> None:
    h = make(cap=100)
    await started(3, h)
    report = h.dispatcher.shed(3)
    await h.settle()
    assert (report.group_ids, report.cancelled) == (("g2",), 4)
    assert sorted(h.engines.aborted) == [("g2", i) for i in range(4)]
    assert h.inflight == 8
    report = h.dispatcher.shed(5)
    assert report.group_ids == ("g1", "g0")


async def test_a_groups_age_is_the_start_of_its_oldest_live_member(make: MakeHarness) -> None:
    h = make(cap=5)
    h.submit("old", 4)
    await h.advance(1.0)
    h.submit("mid", 1)  # started at t=1
    await h.advance(1.0)
    h.dispatcher.set_cap(0)
    h.engines.finish("old", 0, 1, 2, 3)  # old's first members are gone...
    await h.settle()
    h.dispatcher.shed(0)
    h.submit("old2", 4)
    h.dispatcher.set_cap(5)
    # Completions above the cap banked no credit, so old2 starts when the window slides (t=5).
    await h.advance(5.0)
    # ...so "old2" is younger than "mid" (t=1): it goes first.
    assert h.dispatcher.shed(1).group_ids == ("old2",)


async def test_only_live_episodes_count_toward_the_number_shed(make: MakeHarness) -> None:
    h = make(cap=100)
    await started(3, h)
    h.engines.finish("g2", 0, 1, 2)  # g2 has one live episode left
    await h.settle()
    report = h.dispatcher.shed(3)
    assert (report.group_ids, report.cancelled) == (("g2", "g1"), 5)


async def test_eval_groups_are_never_shed(make: MakeHarness) -> None:
    h = make(cap=100)
    h.submit("eval", 4, EVAL)
    h.submit("train", 4, TRAIN)
    await h.settle()
    report = h.dispatcher.shed(8)
    await h.settle()
    assert (report.group_ids, report.cancelled, h.engines.live("eval")) == (
        ("train",),
        4,
        [0, 1, 2, 3],
    )


async def test_an_episode_cancelled_before_its_first_step_still_returns_its_permit(
    make: MakeHarness,
) -> None:
    h = make(cap=100)
    h.submit("g0")
    report = h.dispatcher.shed(1)  # no yield since submit: the tasks never ran
    await h.settle()
    assert (report.cancelled, h.inflight) == (4, 0)
    assert [f.outcome for f in h.finished] == [PermitOutcome.CANCELLED] * 4


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
    await h.advance(5.0)  # the drop refunded no admission: the next window takes v1
    assert h.engines.live("v1") == [0, 1, 2, 3]
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


# -- property: a shed never overshoots by more than one group ---------------------------------


async def _shed_scenario(sizes: list[int], done: list[int], kinds: list[bool], ask: int) -> None:
    h = Harness(cap=10_000)
    for n, (size, is_eval) in enumerate(zip(sizes, kinds, strict=True)):
        h.submit(f"g{n}", size, EVAL if is_eval else TRAIN)
        await h.advance(1.0)
    for n, (size, finished) in enumerate(zip(sizes, done, strict=True)):
        h.engines.finish(f"g{n}", *range(min(finished, size)))
    await h.settle()
    live_train = sum(len(h.engines.live(f"g{n}")) for n, is_eval in enumerate(kinds) if not is_eval)
    report = h.dispatcher.shed(ask)
    await h.settle()
    assert report.cancelled <= ask + max(sizes) - 1 or report.cancelled == 0
    assert report.cancelled >= min(ask, live_train)
    assert h.inflight == sum(len(h.engines.live(f"g{n}")) for n in range(len(sizes)))
    await h.dispatcher.aclose()


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.integers(1, 8), st.integers(0, 8), st.booleans()), min_size=1, max_size=12
    ),
    ask=st.integers(0, 40),
)
def test_property_a_shed_cancels_at_most_the_ask_plus_one_group(
    data: list[tuple[int, int, bool]], ask: int
) -> None:
    sizes = [d[0] for d in data]
    done = [d[1] for d in data]
    kinds = [d[2] for d in data]
    asyncio.run(_shed_scenario(sizes, done, kinds, ask))
