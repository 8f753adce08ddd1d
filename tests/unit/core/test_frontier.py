"""The frontier on its own: how it ages, is rechecked, judged, scaled and stored."""

from __future__ import annotations

import pytest

from tests.unit.core.builders import sample
from workers.core.controller.policies.base import PoolView
from workers.core.controller.policies.frontier import RECHECK_TURNOVERS, Frontier
from workers.core.controller.policies.probe import EpochRate, ThroughputProbe
from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, DecisionKind

MEMORY = 20.0


def frontier_at(level: float, turnover: float = 0.0) -> Frontier:
    frontier = Frontier(memory=MEMORY, growth=1.15, step=0.1)
    frontier.raise_to(level, turnover)
    return frontier


def pool(level: float, turnover: float, inflight: int | None = None) -> PoolView:
    return PoolView(level, round(level) if inflight is None else inflight, None, turnover)


class Epochs:
    """A probe fed whole epochs one at a time: four polls 5 s apart each."""

    def __init__(self, inflight: int, tokens: int) -> None:
        self.probe = ThroughputProbe(step=0.1, flat_gain=0.3)
        self.probe.observe(PollSummary.from_samples([sample(tokens=0)], 0.0), inflight, 0.0)
        self.closed = 0
        self.run(inflight, tokens)

    def run(self, inflight: int, tokens: int) -> None:
        """One more epoch of ``inflight`` episodes making ``tokens`` a poll."""
        for k in range(1, 5):
            at = 20.0 * self.closed + 5.0 * k
            poll = PollSummary.from_samples([sample(tokens=tokens)], at)
            self.probe.observe(poll, inflight, self.closed + k / 4)
        self.closed += 1


def test_the_frontier_is_the_largest_pool_that_paid_and_excuses_the_cap_that_ran_it() -> None:
    frontier = frontier_at(120.4)
    frontier.raise_to(100.0, 1.0)
    assert frontier.level == 120.4
    assert frontier.excuses(121.0)  # the mean of an epoch: its cap was the next whole episode
    assert frontier.excuses(121.9)  # ...and a level short of the episode after holds that cap
    assert not frontier.excuses(122.0)
    assert not Frontier(memory=MEMORY, growth=1.15, step=0.1).excuses(1.0)


def test_within_its_memory_a_frontier_is_neither_rechecked_nor_forgotten() -> None:
    frontier = frontier_at(100.0)
    frontier.age(MEMORY, EpochRate(100.0, 500.0), pressed=False)
    assert (frontier.level, frontier.rechecking) == (100.0, False)


def test_past_its_memory_one_no_longer_pressed_is_forgotten() -> None:
    frontier = frontier_at(100.0)
    frontier.age(MEMORY + 0.1, EpochRate(100.0, 500.0), pressed=False)
    assert frontier.level is None


def test_past_its_memory_one_still_pressed_is_rechecked_from_an_epoch_at_it() -> None:
    frontier = frontier_at(100.0)
    frontier.age(MEMORY + 0.1, EpochRate(80.0, 500.0), pressed=True)  # not an epoch at it
    assert not frontier.rechecking and frontier.level == 100.0
    frontier.age(MEMORY + 1.0, EpochRate(95.0, 500.0), pressed=True)  # within a step of it
    assert frontier.rechecking


def test_a_pressed_frontier_with_no_epoch_at_it_is_forgotten_after_the_recheck_window() -> None:
    frontier = frontier_at(100.0)
    frontier.age(MEMORY + RECHECK_TURNOVERS + 0.1, EpochRate(80.0, 500.0), pressed=True)
    assert frontier.level is None


def test_a_recheck_with_no_verdict_lapses_and_takes_the_frontier_with_it() -> None:
    frontier = frontier_at(100.0)
    frontier.age(MEMORY + 1.0, EpochRate(100.0, 500.0), pressed=True)
    frontier.age(MEMORY + 1.0 + RECHECK_TURNOVERS, None, pressed=True)
    assert frontier.rechecking
    frontier.age(MEMORY + 1.1 + RECHECK_TURNOVERS, None, pressed=True)
    assert (frontier.level, frontier.rechecking) == (None, False)


def test_a_recheck_asks_one_step_under_the_frontier_until_the_next_epoch_closes() -> None:
    epochs = Epochs(100, 1000)
    probe = epochs.probe
    frontier = frontier_at(100.0)
    frontier.age(MEMORY + 1.0, probe.last, pressed=True)
    trim = frontier.recheck_trim(probe, pool(100.0, MEMORY + 1.0))
    assert trim is not None
    assert (trim.kind, trim.cause, trim.shed) == (DecisionKind.TRIM, Cause.FRONTIER, False)
    assert trim.level == pytest.approx(100.0 / 1.15)
    assert "frontier 100 is 20 turnovers old" in trim.detail
    epochs.run(87, 1000)  # another epoch closed: the question is not asked again
    assert frontier.recheck_trim(probe, pool(100.0, MEMORY + 2.0)) is None


@pytest.mark.parametrize(
    ("smaller_tokens", "after"),
    [(800, 100.0), (990, 87.0)],  # lost in proportion: it stands; made as much: it moves down
)
def test_a_recheck_is_judged_on_the_first_whole_epoch_a_step_smaller(
    smaller_tokens: int, after: float
) -> None:
    epochs = Epochs(100, 1000)
    probe = epochs.probe
    frontier = frontier_at(100.0)
    frontier.age(MEMORY + 1.0, probe.last, pressed=True)
    epochs.run(95, 1000)  # the epoch the pool drained in: no verdict yet
    frontier.judge_recheck(probe, pool(87.0, MEMORY + 2.0))
    assert frontier.rechecking
    epochs.run(87, smaller_tokens)
    frontier.judge_recheck(probe, pool(87.0, MEMORY + 3.0))
    assert (frontier.level, frontier.rechecking) == (after, False)
    # Moved down, the step over it is the old frontier's pool, measured to cost nothing.
    assert frontier.excuses(after + 5.0) is (after < 100.0)
    frontier.age(MEMORY + 3.5, probe.last, pressed=True)  # its memory starts again
    assert frontier.level == after and not frontier.rechecking


def test_a_flat_epoch_settles_the_cap_back_until_the_pool_drained_to_it() -> None:
    frontier = Frontier(memory=MEMORY, growth=1.15, step=0.1)
    frontier.settle_at(90.0, 5.0)
    trim = frontier.settle_trim(pool(110.0, 5.0))
    assert trim is not None and trim.level == 90.0 and trim.cause is Cause.THROUGHPUT_FLAT
    frontier.follow(100)
    assert frontier.settling
    frontier.follow(90)
    assert not frontier.settling and frontier.settle_trim(pool(110.0, 6.0)) is None


def test_a_flat_epochs_frontier_excuses_the_probe_step_over_it_until_a_larger_pool_pays() -> None:
    frontier = Frontier(memory=MEMORY, growth=1.15, step=0.1)
    frontier.settle_at(120.4, 5.0)  # the larger pool, at least a step over, made no more
    assert frontier.excuses(133.9) and not frontier.excuses(134.0)  # 120.4 x 1.1 = 132.44
    frontier.raise_to(110.0, 6.0)  # a smaller pool paid: the verdict over 120.4 still holds
    assert frontier.excuses(133.0)
    frontier.raise_to(125.0, 7.0)  # a larger one paid: the step over it is unmeasured
    assert frontier.excuses(125.9) and not frontier.excuses(126.0)


def test_a_new_pool_scales_the_frontier_and_drops_what_the_old_one_measured() -> None:
    frontier = frontier_at(120.0)
    frontier.age(MEMORY + 1.0, EpochRate(120.0, 500.0), pressed=True)
    frontier.scale(2 / 3)
    assert frontier.level == pytest.approx(80.0)
    assert not frontier.rechecking and not frontier.settling


def test_a_stored_frontier_and_its_recheck_survive_a_round_trip() -> None:
    frontier = frontier_at(100.0, 3.0)
    frontier.age(MEMORY + 4.0, EpochRate(100.0, 500.0), pressed=True)
    stored = frontier.to_json()
    assert stored["recheck"] == [100.0, 500.0, MEMORY + 4.0 + RECHECK_TURNOVERS]
    again = Frontier(memory=MEMORY, growth=1.15, step=0.1)
    again.load_json(stored)
    assert again.to_json() == stored
    again.settle_at(90.0, 30.0)
    flat = Frontier(memory=MEMORY, growth=1.15, step=0.1)
    flat.load_json(again.to_json())
    assert flat.to_json()["frontier_flat"] is True and flat.excuses(98.0)


def test_a_frontier_stored_before_flat_verdicts_were_kept_loads_as_one_that_paid() -> None:
    older = frontier_at(100.0).to_json()
    del older["frontier_flat"]
    frontier = Frontier(memory=MEMORY, growth=1.15, step=0.1)
    frontier.load_json(older)
    assert frontier.excuses(100.0) and not frontier.excuses(101.0)
