"""Engines added to a running loop and taken out of it: routing at once, the drain and its
deadline, the rescale for the pool's new KV capacity, and the commands refused."""

from __future__ import annotations

import pytest

from tests.unit.core.builders import sample
from tests.unit.core.loop_harness import PERIOD, Done, MakeLoop, reference
from workers.core.decisions import Cause, DecisionKind
from workers.core.dispatch.episodes import CancelReason
from workers.core.members import PoolMembers


def two(kv: int = 100_000) -> list:
    return [sample("e0", capacity=kv), sample("e1", capacity=kv)]


async def test_an_engine_added_takes_new_groups_at_once_and_the_cap_grows_with_its_kv(
    make_loop: MakeLoop,
) -> None:
    h = await make_loop(reference(start=20), engines=("e0", "e1"))
    h.monitor.samples = two()
    await h.advance(PERIOD)
    join = h.loop.add_engine("e2")
    h.loop.command(join)
    assert (join.kind, join.cause, join.engine) == (DecisionKind.ENGINE_JOIN, Cause.OPERATOR, "e2")
    assert join.reason == "e2 joined the run: it takes new groups now"
    h.submit(3)
    await h.settle()
    assert "e2" in h.episodes.engine_of.values()  # the least loaded engine: the new one
    h.monitor.samples = [*two(), sample("e2", capacity=100_000)]
    await h.advance(PERIOD)
    (rescale,) = [d for d in h.loop.decisions if d.kind is DecisionKind.RESCALE]
    assert (rescale.cause, rescale.cap_before, rescale.cap_after) == (Cause.ENGINE_JOINED, 20, 30)
    assert rescale.reason.endswith("e2 joined: KV 200k -> 300k tokens")
    assert h.loop.engines == ("e0", "e1", "e2")


async def test_an_engine_taken_out_drains_then_leaves_and_the_cap_shrinks_at_once(
    make_loop: MakeLoop,
) -> None:
    h = await make_loop(reference(start=20), engines=("e0", "e1"))
    h.monitor.samples = two()
    await h.advance(PERIOD)
    h.submit(4)
    await h.settle()
    on_e1 = [key for key, engine in h.episodes.engine_of.items() if engine == "e1"]
    assert len(on_e1) == 2
    drain = h.loop.drain_engine("e1", 30.0)
    h.loop.command(drain)
    assert drain.kind is DecisionKind.ENGINE_DRAIN
    assert (
        drain.reason == "e1 leaves the run: no new groups; the 2 episodes on it have 30 s to finish"
    )
    h.submit(4)
    await h.settle()
    assert sum(engine == "e1" for engine in h.episodes.engine_of.values()) == 2  # none new
    await h.advance(PERIOD)
    (rescale,) = [d for d in h.loop.decisions if d.kind is DecisionKind.RESCALE]
    assert (rescale.cause, rescale.cap_before, rescale.cap_after) == (Cause.ENGINE_LEFT, 20, 10)
    assert h.left == []  # its episodes are still running
    for key in on_e1:
        h.episodes.running[key].set_result(Done(tokens=40))
    await h.settle()
    await h.advance(PERIOD)
    (leave,) = [d for d in h.loop.decisions if d.kind is DecisionKind.ENGINE_LEAVE]
    assert (leave.kind, leave.engine, leave.figures["cancelled"]) == (
        DecisionKind.ENGINE_LEAVE,
        "e1",
        0,
    )
    assert leave.reason == "e1 left the run: drained in 2 s"
    assert (h.left, h.loop.engines) == (["e1"], ("e0",))


async def test_episodes_still_on_a_leaving_engine_at_its_deadline_are_cancelled_and_counted(
    make_loop: MakeLoop,
) -> None:
    h = await make_loop(reference(start=20), engines=("e0", "e1"))
    h.monitor.samples = two()
    h.submit(4, size=2)
    await h.settle()
    h.loop.command(h.loop.drain_engine("e1", 3.0))
    await h.advance(PERIOD)
    await h.advance(PERIOD)
    assert h.left == []
    await h.advance(PERIOD)  # the deadline
    (leave,) = [d for d in h.loop.decisions if d.kind is DecisionKind.ENGINE_LEAVE]
    assert leave.kind is DecisionKind.ENGINE_LEAVE
    assert leave.figures["cancelled"] == 4
    assert leave.reason == "e1 left the run: 4 episodes still on it cancelled at its deadline"
    cancelled = [f for f in h.finished if f.cancel_reason is CancelReason.ENGINE_LEFT]
    assert {f.engine_id for f in cancelled} == {"e1"} and len(cancelled) == 4
    assert h.left == ["e1"]
    assert all(
        engine == "e0" for key, engine in h.episodes.engine_of.items() if key in h.episodes.running
    )


async def test_commands_that_cannot_work_are_refused_and_change_nothing(
    make_loop: MakeLoop,
) -> None:
    h = await make_loop(reference(start=20), engines=("e0", "e1"))
    with pytest.raises(ValueError, match="e1 is in it already"):
        h.loop.add_engine("e1")
    with pytest.raises(ValueError, match="e9 is not in the run"):
        h.loop.drain_engine("e9", 10.0)
    with pytest.raises(ValueError, match="drain_s must be"):
        h.loop.drain_engine("e1", -1.0)
    h.loop.drain_engine("e1", 10.0)
    with pytest.raises(ValueError, match="draining out of the run already"):
        h.loop.drain_engine("e1", 10.0)
    with pytest.raises(ValueError, match="the run's last"):
        h.loop.drain_engine("e0", 10.0)
    assert h.loop.engines == ("e0", "e1")


def test_a_drain_of_zero_seconds_ends_at_the_next_look() -> None:
    members = PoolMembers(["a", "b"])
    members.drain("b", 10.0, 0.0)
    (left,) = members.ended(10.0, {"b": 3})
    assert (left.engine, left.past_deadline) == ("b", True)
    assert members.engines == ("a",)
