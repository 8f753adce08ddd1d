"""Shedding: whole train groups, youngest first, their requests aborted; never more than the
ask plus one group."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.core.dispatch_harness import (
    EVAL,
    TRAIN,
    Harness,
    MakeHarness,
    started,
)
from workers.core.dispatch.episodes import CancelReason
from workers.core.dispatch.permits import PermitOutcome

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


async def test_a_second_shed_before_the_first_lands_takes_the_next_group(
    make: MakeHarness,
) -> None:
    """Two cuts in one poll's decisions: the second must not count the group the first one is
    still cancelling."""
    h = make(cap=100)
    await started(3, h)
    first, second = h.dispatcher.shed(3), h.dispatcher.shed(3)
    assert (first.group_ids, second.group_ids) == (("g2",), ("g1",))
    assert second.cancelled == 4


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


async def test_dropping_a_group_cancels_its_live_episodes_and_admits_no_more(
    make: MakeHarness,
) -> None:
    h = make(cap=3)
    h.submit("g0", 5)
    await h.settle()
    h.engines.fail("g0", 0)
    await h.settle()
    assert (h.inflight, h.dispatcher.pending) == (3, 1)  # the failed one's slot was refilled
    assert h.dispatcher.drop("g0") == 3  # the live ones; the last was never admitted
    await h.settle()
    assert (h.inflight, h.dispatcher.pending) == (0, 0)
    assert sorted(h.engines.aborted) == [("g0", 1), ("g0", 2), ("g0", 3)]
    assert [f.cancel_reason for f in h.finished[1:]] == [CancelReason.DROPPED] * 3
    assert h.dispatcher.drop("g0") == 0  # gone: no error
    assert h.dispatcher.drop("never-seen") == 0


async def test_an_episode_cancelled_before_its_first_step_still_returns_its_permit(
    make: MakeHarness,
) -> None:
    h = make(cap=100)
    h.submit("g0")
    report = h.dispatcher.shed(1)  # no yield since submit: the tasks never ran
    await h.settle()
    assert (report.cancelled, h.inflight) == (4, 0)
    assert [f.outcome for f in h.finished] == [PermitOutcome.CANCELLED] * 4


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
