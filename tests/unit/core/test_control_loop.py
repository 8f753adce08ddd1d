"""The control loop: polling, decisions applied to the dispatcher, its life cycle and config."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.unit.core.builders import sample
from tests.unit.core.loop_harness import PERIOD, LoopHarness, MakeLoop, reference
from workers.core.control_loop import LoopConfig, LoopState
from workers.core.controller.concurrency import Controller
from workers.core.controller.observe import ObserveOnly
from workers.core.controller.policies.fixed import FixedPolicy
from workers.core.controller.records import ControllerConfig
from workers.core.decisions import Cause, DecisionKind
from workers.core.dispatch.permits import PermitOutcome


async def test_polls_at_once_then_one_period_apart(make_loop: MakeLoop) -> None:
    h = await make_loop(reference())
    assert (h.monitor.calls, h.loop.polls) == (1, 1)
    await h.advance(PERIOD / 2)
    assert h.monitor.calls == 1
    await h.advance(PERIOD / 2)
    assert h.monitor.calls == 2
    await h.advance(5 * PERIOD)  # a late wake-up polls once; missed polls are not made up
    assert h.monitor.calls == 3
    await h.advance(PERIOD)
    assert h.monitor.calls == 4


async def test_the_first_poll_bootstraps_the_cap_the_dispatcher_admits(make_loop: MakeLoop) -> None:
    h = await make_loop(reference(start=None))  # start derived from KV capacity / max model length
    h.submit(150)
    await h.settle()
    (boot,) = h.loop.decisions
    assert (boot.kind, boot.cap_after) == (DecisionKind.BOOTSTRAP, 100)
    assert (h.loop.dispatcher.cap, h.inflight) == (100, 100)


async def test_a_cut_lowers_the_cap_and_sheds_the_youngest_groups(make_loop: MakeLoop) -> None:
    h = await make_loop(reference(start=8))
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


async def test_a_close_that_is_itself_cancelled_still_cancels_every_episode(
    make_loop: MakeLoop,
) -> None:
    h = await make_loop(reference(start=4))
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
    make_loop: MakeLoop, caplog: pytest.LogCaptureFixture
) -> None:
    h = await make_loop(reference(start=8))
    h.monitor.error = RuntimeError("monitor bug")
    with caplog.at_level(logging.ERROR, logger="workers.core.control_loop"):
        await h.advance(PERIOD)
    assert "poll skipped" in caplog.text
    assert "monitor bug" in caplog.text
    assert (h.loop.polls, h.loop.failed_polls, h.loop.state) == (1, 1, LoopState.RUNNING)
    h.monitor.error = None
    await h.advance(PERIOD)
    assert (h.loop.polls, h.loop.failed_polls) == (2, 1)


async def test_samples_the_controller_rejects_change_nothing(make_loop: MakeLoop) -> None:
    h = await make_loop(reference(start=8))
    h.submit(8)
    await h.settle()
    before = h.loop.decisions
    h.monitor.samples = [sample(kv=1.5, preemptions=9)]  # a usage above 1 is not a reading
    await h.advance(PERIOD)
    assert h.loop.failed_polls == 1
    assert h.loop.decisions == before
    assert (h.loop.dispatcher.cap, h.inflight, h.episodes.aborted) == (8, 8, [])


async def test_observe_only_decisions_are_logged_and_applied_to_nothing(
    make_loop: MakeLoop,
) -> None:
    h = await make_loop(ObserveOnly(reference(start=8)))
    h.submit(8)
    await h.settle()
    h.monitor.samples = [sample(kv=1.0, running=8, preemptions=3)]
    await h.advance(PERIOD)
    cut = h.loop.decisions[-1]
    assert (cut.kind, cut.applied, cut.shadow_after, cut.shed) == (DecisionKind.CUT, False, 6, 0)
    assert (h.loop.dispatcher.cap, h.inflight, h.episodes.aborted) == (8, 8, [])


async def test_a_fixed_cap_stays_under_preemptions(make_loop: MakeLoop) -> None:
    ctl = Controller(
        ControllerConfig(min_inflight=6, max_inflight=6, initial_inflight=6), FixedPolicy()
    )
    h = await make_loop(ctl)
    h.submit(20)
    await h.settle()
    for _ in range(3):
        h.monitor.samples = [sample(kv=1.0, running=6, preemptions=2)]
        await h.advance(PERIOD)
        h.episodes.finish(2)
        await h.settle()
    assert not {DecisionKind.CUT, DecisionKind.TRIM} & set(h.kinds())
    assert (h.loop.dispatcher.cap, h.inflight, h.episodes.aborted) == (6, 6, [])


async def test_closing_stops_polling_cancels_every_episode_and_returns_permits(
    make_loop: MakeLoop,
) -> None:
    h = await make_loop(reference(start=6))
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
    h = LoopHarness(reference())
    async with h.loop:
        assert h.loop.state is LoopState.RUNNING
        with pytest.raises(RuntimeError, match="running; it can be entered once"):
            await h.loop.__aenter__()
    with pytest.raises(RuntimeError, match="closed; it can be entered once"):
        await h.loop.__aenter__()


async def test_groups_wait_until_the_loop_runs() -> None:
    h = LoopHarness(reference(start=4))
    h.submit(4)
    await h.settle()
    assert (h.loop.state, h.monitor.calls) == (LoopState.NEW, 0)
    async with h.loop:
        await h.settle()
        assert h.monitor.calls == 1
        assert h.inflight == 4
    assert h.inflight == 0


async def test_the_decision_log_keeps_the_most_recent(make_loop: MakeLoop) -> None:
    h = await make_loop(reference(start=8), log_size=2)
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
