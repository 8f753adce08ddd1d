"""The control loop with a scripted monitor, hand-finished episodes and a manual clock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.unit.core.builders import sample
from workers.core.clock import ManualClock
from workers.core.concurrency import Controller
from workers.core.control_loop import (
    ControlLoop,
    EpisodeFailed,
    LoopConfig,
    LoopState,
    Steering,
)
from workers.core.control_records import ControllerConfig
from workers.core.decisions import Cause, DecisionKind
from workers.core.dispatch_records import DispatcherConfig
from workers.core.episodes import EpisodeTicket, FinishedEpisode, GroupSpec
from workers.core.observe import ObserveOnly
from workers.core.pacing import PacingConfig
from workers.core.permits import EpisodeKind, PermitOutcome
from workers.core.policies.fixed import FixedPolicy
from workers.core.policies.reference import ReferencePolicy
from workers.core.samples import EngineHealth, LoadSample

UNPACED = DispatcherConfig(pacing=PacingConfig(cap_fraction=1.0))
PERIOD = 1.0


@dataclass(frozen=True, slots=True)
class Done:
    """An episode's result, as the rollout client's TurnResult shows it to the loop."""

    tokens: int
    ok: bool = True


class Episodes:
    """Episodes that run until the test ends them; records which ones were cancelled."""

    def __init__(self) -> None:
        self.running: dict[tuple[str, int], asyncio.Future[Done]] = {}
        self.aborted: list[tuple[str, int]] = []
        self.engine_of: dict[tuple[str, int], str] = {}

    async def __call__(self, ticket: EpisodeTicket[int], engine: str) -> Done:
        key = (ticket.group_id, ticket.index)
        self.engine_of[key] = engine
        future: asyncio.Future[Done] = asyncio.get_running_loop().create_future()
        self.running[key] = future
        try:
            return await future
        except asyncio.CancelledError:
            self.aborted.append(key)  # where the rollout client's HTTP request is closed
            raise
        finally:
            del self.running[key]

    def finish(self, count: int, result: Done = Done(tokens=40)) -> None:
        """End the ``count`` oldest running episodes with ``result``."""
        for future in self._oldest(count):
            future.set_result(result)

    def fail(self, count: int) -> None:
        for future in self._oldest(count):
            future.set_exception(RuntimeError("engine said 500"))

    def _oldest(self, count: int) -> list[asyncio.Future[Done]]:
        """Episodes not yet told how they end (an ended one stays listed until it resumes)."""
        return [future for future in self.running.values() if not future.done()][:count]


class Monitor:
    """The injected poll: answers with ``samples`` or raises ``error``; counts its calls."""

    def __init__(self) -> None:
        self.samples: list[LoadSample] = [sample()]
        self.error: Exception | None = None
        self.calls = 0

    async def __call__(self) -> list[LoadSample]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.samples


class Harness:
    def __init__(
        self, controller: Steering, log_size: int = 10_000, engines: tuple[str, ...] = ("e0",)
    ) -> None:
        self.clock = ManualClock()
        self.episodes = Episodes()
        self.monitor = Monitor()
        self.finished: list[FinishedEpisode[int, Done]] = []
        self.controller = controller
        self.loop: ControlLoop[int, Done] = ControlLoop(
            controller=controller,
            poll=self.monitor,
            run_episode=self.episodes,
            clock=self.clock,
            engines=engines,
            config=LoopConfig(poll_period=PERIOD, decision_log_size=log_size),
            dispatcher_config=UNPACED,
            on_finished=self.finished.append,
        )
        self._groups = 0

    def submit(self, groups: int, size: int = 1) -> None:
        for _ in range(groups):
            self._groups += 1
            spec = GroupSpec(f"g{self._groups}", EpisodeKind.TRAIN, "math", 0, (0,) * size)
            self.loop.dispatcher.submit(spec)

    async def settle(self) -> None:
        """Let every ready task and callback run: episodes end, permits return, refills start."""
        for _ in range(50):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.settle()

    @property
    def inflight(self) -> int:
        return self.loop.dispatcher.inflight

    def kinds(self) -> list[DecisionKind]:
        return [d.kind for d in self.loop.decisions]


MakeHarness = Callable[..., Harness]


def reference(start: int | None = 8, **config: Any) -> Controller:
    return Controller(ControllerConfig(initial_inflight=start, **config), ReferencePolicy())


@pytest.fixture
async def make() -> AsyncIterator[MakeHarness]:
    """Running loops, closed after the test whatever it did."""
    made: list[Harness] = []

    async def factory(controller: Steering, **kwargs: Any) -> Harness:
        harness = Harness(controller, **kwargs)
        await harness.loop.__aenter__()
        await harness.settle()
        made.append(harness)
        return harness

    yield factory  # type: ignore[misc]
    for harness in made:
        await harness.loop.aclose()


async def test_polls_at_once_then_one_period_apart(make: MakeHarness) -> None:
    h = await make(reference())
    assert (h.monitor.calls, h.loop.polls) == (1, 1)
    await h.advance(PERIOD / 2)
    assert h.monitor.calls == 1
    await h.advance(PERIOD / 2)
    assert h.monitor.calls == 2
    await h.advance(5 * PERIOD)  # a late wake-up polls once; missed polls are not made up
    assert h.monitor.calls == 3
    await h.advance(PERIOD)
    assert h.monitor.calls == 4


async def test_the_first_poll_bootstraps_the_cap_the_dispatcher_admits(make: MakeHarness) -> None:
    h = await make(reference(start=None))  # start derived from KV capacity / max model length
    h.submit(150)
    await h.settle()
    (boot,) = h.loop.decisions
    assert (boot.kind, boot.cap_after) == (DecisionKind.BOOTSTRAP, 100)
    assert (h.loop.dispatcher.cap, h.inflight) == (100, 100)


async def test_a_cut_lowers_the_cap_and_sheds_the_youngest_groups(make: MakeHarness) -> None:
    h = await make(reference(start=8))
    h.submit(4, size=2)
    await h.settle()
    first_group = sorted(h.episodes.running)[:2]
    h.monitor.samples = [sample(kv=1.0, running=8, preemptions=3)]
    await h.advance(PERIOD)

    cut = h.loop.decisions[-1]
    assert (cut.kind, cut.cause, cut.cap_after, cut.shed) == (
        DecisionKind.CUT,
        Cause.PREEMPTION,
        6,
        2,
    )
    assert h.loop.dispatcher.cap == 6
    assert h.episodes.aborted == [("g4", 0), ("g4", 1)]  # the youngest group, whole
    assert h.inflight == 6
    assert all(key in h.episodes.running for key in first_group)


async def test_cancelled_episodes_are_not_fed_to_the_controller(make: MakeHarness) -> None:
    ctl = reference(start=8)
    h = await make(ctl)
    h.submit(8)
    await h.settle()
    h.monitor.samples = [sample(kv=1.0, running=8, preemptions=3)]
    await h.advance(PERIOD)
    assert len(h.episodes.aborted) == 2
    assert ctl.make_stats(h.clock.now()).turnover == 0.0
    h.episodes.finish(1)
    await h.settle()
    assert ctl.make_stats(h.clock.now()).turnover == pytest.approx(1 / 6)


async def test_completions_grow_the_cap_and_the_dispatcher_admits_at_once(
    make: MakeHarness,
) -> None:
    h = await make(reference(start=4))
    h.submit(20)
    await h.settle()
    assert h.inflight == 4
    h.episodes.finish(4)  # one full turnover of the pool on a clear poll: x1.25
    await h.settle()

    grows = [d for d in h.loop.decisions if d.kind is DecisionKind.GROW]
    assert grows
    assert grows[-1].cap_after == 5
    assert (h.loop.dispatcher.cap, h.inflight) == (5, 5)


@pytest.mark.parametrize("ending", ["raised", "not ok", "no tokens"])
async def test_failed_episodes_are_fed_but_never_grow_the_cap(
    make: MakeHarness, ending: str
) -> None:
    ctl = reference(start=4)
    h = await make(ctl)
    h.submit(20)
    await h.settle()
    for _ in range(3):  # at least three full turnovers: a clear pool would grow x1.95
        if ending == "raised":
            h.episodes.fail(4)
        else:
            h.episodes.finish(4, Done(tokens=0) if ending == "no tokens" else Done(9, ok=False))
        await h.advance(PacingConfig().window)  # failures buy no refill before the window ends

    assert DecisionKind.GROW not in h.kinds()
    assert (ctl.cap, h.loop.dispatcher.cap, h.inflight) == (4, 4, 4)
    assert ctl.make_stats(h.clock.now()).turnover >= 3.0  # every failure was fed


async def test_a_result_that_says_it_failed_is_a_failure_and_buys_no_refill(
    make: MakeHarness,
) -> None:
    h = await make(reference(start=4))
    h.submit(20)
    await h.settle()
    h.episodes.finish(4, Done(9, ok=False))
    await h.settle()
    assert [f.outcome for f in h.finished] == [PermitOutcome.FAILED] * 4
    error = h.finished[0].error
    assert isinstance(error, EpisodeFailed)
    assert error.result == Done(9, ok=False)
    assert h.inflight == 0  # no pacing refund: the refill waits for the next window


async def test_a_close_that_is_itself_cancelled_still_cancels_every_episode(
    make: MakeHarness,
) -> None:
    h = await make(reference(start=4))
    h.submit(4)
    await h.settle()
    closing = asyncio.create_task(h.loop.aclose())
    await asyncio.sleep(0)  # the close now waits for the poll task
    closing.cancel()  # a shutdown timeout, say
    await h.settle()
    assert closing.cancelled()
    assert (h.loop.state, h.inflight, h.episodes.running) == (LoopState.CLOSED, 0, {})
    assert len(h.episodes.aborted) == 4


async def test_a_poll_that_raises_is_skipped_and_polling_goes_on(
    make: MakeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    h = await make(reference(start=8))
    h.monitor.error = RuntimeError("monitor bug")
    with caplog.at_level(logging.ERROR, logger="workers.core.control_loop"):
        await h.advance(PERIOD)
    assert "poll skipped" in caplog.text
    assert "monitor bug" in caplog.text
    assert (h.loop.polls, h.loop.failed_polls, h.loop.state) == (1, 1, LoopState.RUNNING)
    h.monitor.error = None
    await h.advance(PERIOD)
    assert (h.loop.polls, h.loop.failed_polls) == (2, 1)


async def test_samples_the_controller_rejects_change_nothing(make: MakeHarness) -> None:
    h = await make(reference(start=8))
    h.submit(8)
    await h.settle()
    before = h.loop.decisions
    h.monitor.samples = [sample(kv=1.5, preemptions=9)]  # a usage above 1 is not a reading
    await h.advance(PERIOD)
    assert h.loop.failed_polls == 1
    assert h.loop.decisions == before
    assert (h.loop.dispatcher.cap, h.inflight, h.episodes.aborted) == (8, 8, [])


async def test_a_result_the_controller_cannot_read_is_logged_and_the_loop_goes_on(
    make: MakeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    h = await make(reference(start=2))
    h.submit(4)
    await h.settle()
    with caplog.at_level(logging.ERROR, logger="workers.core.control_loop"):
        h.episodes.finish(1, Done(tokens=-5))
        await h.settle()
    assert "episode g1/0 gave a result the controller cannot read" in caplog.text
    assert h.inflight == 2  # its permit came back and a replacement was admitted
    h.episodes.finish(1)
    await h.settle()
    assert len(h.finished) == 2


async def test_observe_only_decisions_are_logged_and_applied_to_nothing(
    make: MakeHarness,
) -> None:
    h = await make(ObserveOnly(reference(start=8)))
    h.submit(8)
    await h.settle()
    h.monitor.samples = [sample(kv=1.0, running=8, preemptions=3)]
    await h.advance(PERIOD)
    cut = h.loop.decisions[-1]
    assert (cut.kind, cut.applied, cut.shadow_after, cut.shed) == (DecisionKind.CUT, False, 6, 0)
    assert (h.loop.dispatcher.cap, h.inflight, h.episodes.aborted) == (8, 8, [])


async def test_a_fixed_cap_stays_under_preemptions(make: MakeHarness) -> None:
    ctl = Controller(
        ControllerConfig(min_inflight=6, max_inflight=6, initial_inflight=6), FixedPolicy()
    )
    h = await make(ctl)
    h.submit(20)
    await h.settle()
    for _ in range(3):
        h.monitor.samples = [sample(kv=1.0, running=6, preemptions=2)]
        await h.advance(PERIOD)
        h.episodes.finish(2)
        await h.settle()
    assert not {DecisionKind.CUT, DecisionKind.TRIM} & set(h.kinds())
    assert (h.loop.dispatcher.cap, h.inflight, h.episodes.aborted) == (6, 6, [])


async def test_every_finished_episode_reaches_the_caller_cancelled_ones_too(
    make: MakeHarness,
) -> None:
    h = await make(reference(start=4))
    h.submit(6)
    await h.settle()
    h.episodes.finish(1)
    h.episodes.fail(1)
    await h.settle()
    await h.loop.aclose()
    outcomes = sorted(f.outcome.value for f in h.finished)
    # The completion's replacement runs; the failure's does not (failures refund no pacing).
    assert outcomes == ["cancelled"] * 3 + ["completed", "failed"]
    assert h.finished[0].result == Done(tokens=40)


async def test_closing_stops_polling_cancels_every_episode_and_returns_permits(
    make: MakeHarness,
) -> None:
    h = await make(reference(start=6))
    h.submit(3, size=2)
    await h.settle()
    assert h.inflight == 6
    await h.loop.aclose()
    assert h.loop.state is LoopState.CLOSED
    assert (h.inflight, len(h.episodes.aborted), h.episodes.running) == (0, 6, {})
    calls = h.monitor.calls
    await h.advance(10 * PERIOD)
    assert h.monitor.calls == calls
    await h.loop.aclose()  # closing twice is harmless
    with pytest.raises(RuntimeError, match="dispatcher is closed"):
        h.submit(1)
    assert all(f.outcome is PermitOutcome.CANCELLED for f in h.finished)


async def test_a_loop_is_entered_once() -> None:
    h = Harness(reference())
    async with h.loop:
        assert h.loop.state is LoopState.RUNNING
        with pytest.raises(RuntimeError, match="running; it can be entered once"):
            await h.loop.__aenter__()
    with pytest.raises(RuntimeError, match="closed; it can be entered once"):
        await h.loop.__aenter__()


async def test_groups_wait_until_the_loop_runs() -> None:
    h = Harness(reference(start=4))
    h.submit(4)
    await h.settle()
    assert (h.loop.state, h.monitor.calls) == (LoopState.NEW, 0)
    async with h.loop:
        await h.settle()
        assert h.monitor.calls == 1
        assert h.inflight == 4
    assert h.inflight == 0


async def test_the_decision_log_keeps_the_most_recent(make: MakeHarness) -> None:
    h = await make(reference(start=8), log_size=2)
    h.submit(8)
    await h.settle()
    for preemptions in (3, 0, 3, 0):  # cut, drain release, cut, drain release
        h.monitor.samples = [sample(kv=0.5, running=h.inflight, preemptions=preemptions)]
        await h.advance(PERIOD)

    kept = h.loop.decisions
    assert [d.kind for d in kept] == [DecisionKind.CUT, DecisionKind.DRAIN_RELEASE]
    assert kept[0].cap_before == 6  # the second cut: the first one's decision was dropped
    assert kept[0].cap_after == h.loop.dispatcher.cap


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"poll_period": 0.0}, "poll_period must be in"),
        ({"poll_period": float("nan")}, "poll_period must be finite"),
        ({"decision_log_size": 0}, "decision_log_size must be in"),
    ],
)
def test_a_bad_config_is_refused_with_the_field_named(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoopConfig(**fields)


async def test_an_engine_with_every_rank_down_gets_no_new_groups_until_one_is_back(
    make: MakeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    h = await make(reference(start=8), engines=("e0", "e1"))
    down = EngineHealth.DOWN
    h.monitor.samples = [sample("e0/0", health=down), sample("e0/1", health=down), sample("e1")]
    await h.advance(PERIOD)
    h.submit(3, size=2)
    await h.settle()
    assert {h.episodes.engine_of[key] for key in h.episodes.running} == {"e1"}
    assert "engine e0 is down" in caplog.text

    h.monitor.samples = [sample("e0/0", health=down), sample("e0/1"), sample("e1")]
    await h.advance(PERIOD)
    h.submit(1, size=2)
    await h.settle()
    assert h.episodes.engine_of[("g4", 0)] == "e0"  # back, and the least loaded
    assert "engine e0 is back" in caplog.text


async def test_a_stale_engine_keeps_taking_groups(make: MakeHarness) -> None:
    """One failed scrape says the metrics lag, not that the server stopped serving."""
    h = await make(reference(start=8), engines=("e0", "e1"))
    h.monitor.samples = [sample("e0", health=EngineHealth.STALE), sample("e1")]
    await h.advance(PERIOD)
    h.submit(2, size=2)
    await h.settle()
    assert {h.episodes.engine_of[key] for key in h.episodes.running} == {"e0", "e1"}
