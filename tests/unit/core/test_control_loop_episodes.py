"""The control loop and its episodes: which endings reach the controller, and where new
groups go when engines fail."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from tests.unit.core.builders import sample
from tests.unit.core.loop_harness import PERIOD, UNPACED, Done, MakeLoop, reference
from workers.core.control_loop import EpisodeFailed
from workers.core.decisions import DecisionKind
from workers.core.dispatch.breaker import BreakerConfig
from workers.core.dispatch.pacing import PacingConfig
from workers.core.dispatch.permits import PermitOutcome
from workers.core.samples import EngineHealth


async def test_cancelled_episodes_are_not_fed_to_the_controller(make_loop: MakeLoop) -> None:
    ctl = reference(start=8)
    h = await make_loop(ctl)
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
    make_loop: MakeLoop,
) -> None:
    h = await make_loop(reference(start=4))
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
    make_loop: MakeLoop, ending: str
) -> None:
    ctl = reference(start=4)
    # Twelve failures in a row on one engine would take it out of routing (test_breaker.py):
    # here the failures must keep coming.
    never_out = dataclasses.replace(UNPACED, breaker=BreakerConfig(failures=1_000_000))
    h = await make_loop(ctl, dispatcher_config=never_out)
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
    make_loop: MakeLoop,
) -> None:
    h = await make_loop(reference(start=4))
    h.submit(20)
    await h.settle()
    h.episodes.finish(4, Done(9, ok=False))
    await h.settle()
    assert [f.outcome for f in h.finished] == [PermitOutcome.FAILED] * 4
    error = h.finished[0].error
    assert isinstance(error, EpisodeFailed)
    assert error.result == Done(9, ok=False)
    assert h.inflight == 0  # no pacing refund: the refill waits for the next window


async def test_a_result_the_controller_cannot_read_is_logged_and_the_loop_goes_on(
    make_loop: MakeLoop, caplog: pytest.LogCaptureFixture
) -> None:
    h = await make_loop(reference(start=2))
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


async def test_every_finished_episode_reaches_the_caller_cancelled_ones_too(
    make_loop: MakeLoop,
) -> None:
    h = await make_loop(reference(start=4))
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


async def test_an_engine_with_every_rank_down_gets_no_new_groups_until_one_is_back(
    make_loop: MakeLoop, caplog: pytest.LogCaptureFixture
) -> None:
    h = await make_loop(reference(start=8), engines=("e0", "e1"))
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


async def test_a_stale_engine_keeps_taking_groups(make_loop: MakeLoop) -> None:
    """One failed scrape says the metrics lag, not that the server stopped serving."""
    h = await make_loop(reference(start=8), engines=("e0", "e1"))
    h.monitor.samples = [sample("e0", health=EngineHealth.STALE), sample("e1")]
    await h.advance(PERIOD)
    h.submit(2, size=2)
    await h.settle()
    assert {h.episodes.engine_of[key] for key in h.episodes.running} == {"e0", "e1"}


async def test_an_engine_out_and_back_are_decisions_and_no_usable_engine_fails_the_run(
    make_loop: MakeLoop,
) -> None:
    failed: list[str] = []
    config = dataclasses.replace(
        UNPACED, breaker=BreakerConfig(failures=2, backoff_s=1.0, give_up_s=3 * PERIOD)
    )
    h = await make_loop(reference(start=2), dispatcher_config=config)
    h.loop._on_failed = failed.append
    h.submit(10)
    await h.settle()
    h.episodes.fail(2)
    await h.settle()
    [out] = [d for d in h.loop.decisions if d.kind is DecisionKind.ENGINE_OUT]
    assert out.alert and out.cause.value == "engine failing" and out.cap_after == out.cap_before
    assert out.figures == {"failures": 2.0, "backoff_s": 1.0}
    for _ in range(3):
        await h.advance(PERIOD)
    assert failed and failed[0].startswith("no engine has been usable for ")
    assert h.loop.failure == failed[0]
    await h.advance(PERIOD)
    assert len(failed) == 1  # said once
