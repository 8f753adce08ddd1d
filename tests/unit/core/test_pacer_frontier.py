"""Pacer past the KV target: the throughput probe decides, not the KV line."""

from __future__ import annotations

import pytest

from tests.unit.core.builders import sample
from workers.core.controller.policies.base import PoolView, Proposal, Reading
from workers.core.controller.policies.pacer import PacerConfig, PacerPolicy
from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, DecisionKind, Signal

POLLS_PER_EPOCH = 4


class Run:
    """Feeds a policy polls 5 s apart, four to a turnover epoch."""

    def __init__(self, policy: PacerPolicy | None = None) -> None:
        self.policy = policy or PacerPolicy()
        self.polls = 0

    def poll(
        self, inflight: int, *, level: float | None = None, tokens: int = 1000, **fields: object
    ) -> tuple[Reading, Proposal | None]:
        self.polls += 1
        view = PoolView(
            float(inflight) if level is None else level,
            inflight,
            None,
            self.polls / POLLS_PER_EPOCH,
        )
        summary = PollSummary.from_samples([sample(tokens=tokens, **fields)], self.polls * 5.0)  # type: ignore[arg-type]
        reading = self.policy.read(summary, view)
        return reading, self.policy.propose(reading, view)

    def epoch(self, inflight: int, tokens: int, **fields: object) -> list[Reading]:
        return [self.poll(inflight, tokens=tokens, **fields)[0] for _ in range(POLLS_PER_EPOCH)]


def paid_climb() -> Run:
    """Two epochs: 100 in flight, then 120 with 20 % more tokens: the larger pool paid."""
    run = Run()
    run.epoch(100, 1000, kv=0.5)
    run.epoch(120, 1200, kv=0.5)
    return run


def test_while_a_larger_pool_pays_preemptions_grow_the_cap_instead_of_cutting_it() -> None:
    run = paid_climb()
    reading, proposal = run.poll(125, kv=1.0, preemptions=5, waiting_capacity=30)
    assert (reading.signal, reading.cause) == (Signal.CLEAR, Cause.THROUGHPUT_RISING)
    assert reading.growth == pytest.approx(PacerConfig().frontier_growth)
    assert proposal is None
    assert reading.figures["frontier"] == pytest.approx(120.0)


def flat_epochs(run: Run) -> None:
    """Two epochs of 140 in flight after ``paid_climb``: 17 % more pool for 1 % more tokens is
    flat, and the second epoch confirms the first (one epoch is only a suspect)."""
    for _ in range(2):
        run.epoch(140, 1210, kv=1.0)


def test_the_same_preemption_without_a_paid_epoch_cuts() -> None:
    run = Run()
    run.epoch(100, 1000, kv=0.5)
    reading, proposal = run.poll(105, kv=1.0, preemptions=5)
    assert reading.signal is Signal.HARD
    assert proposal is not None
    assert proposal.kind is DecisionKind.CUT


def test_a_flat_epoch_trims_back_to_the_smaller_pool_and_holds_there_through_preemptions() -> None:
    run = paid_climb()
    flat_epochs(run)
    reading, proposal = run.poll(140, level=120.0, kv=1.0, preemptions=5)
    assert proposal is None  # the trim came with the poll that closed the epoch
    # The pool drains to the frontier; meanwhile its preemptions and its queue are expected.
    for inflight in (135, 128):
        reading, proposal = run.poll(
            inflight, level=120.0, kv=1.0, preemptions=9, waiting_capacity=40, running=10
        )
        assert reading.signal is Signal.SOFT
        assert proposal is None
    # At the frontier, preemptions are held, not cut: that pool was measured to pay.
    reading, proposal = run.poll(120, kv=1.0, preemptions=3)
    assert (reading.signal, reading.cause, proposal) == (Signal.SOFT, Cause.FRONTIER, None)


def test_within_a_step_over_a_flat_epochs_frontier_preemptions_are_held_not_cut() -> None:
    run = paid_climb()
    flat_epochs(run)  # the frontier is 120, and 140 was measured to cost nothing
    run.epoch(120, 1200, kv=0.9)  # drained to it: settled
    # Growth crept back into the step the flat epoch measured: its preemptions are its price.
    reading, proposal = run.poll(131, kv=1.0, preemptions=5)
    assert (reading.signal, reading.cause, proposal) == (Signal.SOFT, Cause.FRONTIER, None)


def test_the_poll_that_closes_a_flat_epoch_proposes_the_trim_without_shedding() -> None:
    run = paid_climb()
    readings = [run.poll(140, tokens=1210, kv=1.0) for _ in range(2 * POLLS_PER_EPOCH)]
    assert [proposal for _, proposal in readings[:-1]] == [None] * (2 * POLLS_PER_EPOCH - 1)
    _, proposal = readings[-1]
    assert proposal is not None
    assert (proposal.kind, proposal.cause, proposal.shed) == (
        DecisionKind.TRIM,
        Cause.THROUGHPUT_FLAT,
        False,
    )
    assert proposal.level == pytest.approx(120.0)


def test_a_preemption_above_the_frontier_once_growth_stopped_paying_cuts() -> None:
    run = paid_climb()
    run.epoch(125, 1250, kv=0.5)  # 4 % more pool: not judged, so the last epoch paid nothing
    reading, proposal = run.poll(130, kv=1.0, preemptions=5)
    assert reading.signal is Signal.HARD
    assert proposal is not None
    assert proposal.kind is DecisionKind.CUT


def test_a_level_a_fraction_over_the_frontier_runs_its_pool_and_is_held_not_cut() -> None:
    run = paid_climb()
    run.epoch(125, 1250, kv=0.5)  # as above: the frontier is 120 and nothing pays now
    # Growth left the level at 120.6: the cap is still 120, the pool that paid.
    reading, proposal = run.poll(120, level=120.6, kv=1.0, preemptions=5)
    assert (reading.signal, reading.cause, proposal) == (Signal.SOFT, Cause.FRONTIER, None)


def test_a_frontier_no_longer_holding_the_pool_past_the_target_is_forgotten_with_the_knee() -> None:
    run = paid_climb()
    memory = PacerConfig().knee_memory_turnovers
    while run.polls / POLLS_PER_EPOCH <= 2 + memory:
        run.poll(118, kv=0.5)
    reading, proposal = run.poll(118, kv=1.0, preemptions=5)
    assert "frontier" not in reading.figures
    assert reading.signal is Signal.HARD
    assert proposal is not None


def held_at_the_frontier_past_its_memory() -> tuple[Run, Proposal]:
    """The paid climb's frontier of 120, held preempting until its memory runs out: the
    poll that finds it old proposes the recheck's trim."""
    run = paid_climb()
    run.epoch(120, 1200, kv=1.0, preemptions=5)  # the verdict that paid lapses with it
    memory = PacerConfig().knee_memory_turnovers
    while True:
        reading, proposal = run.poll(120, tokens=1200, kv=1.0, preemptions=5)
        assert reading.signal is not Signal.HARD
        if proposal is not None:
            assert run.polls / POLLS_PER_EPOCH > 2 + memory
            return run, proposal
        assert (reading.signal, reading.cause) == (Signal.SOFT, Cause.FRONTIER)


@pytest.mark.parametrize("phase", [0, 1, 2])
def test_one_poll_under_the_kv_target_does_not_forget_an_aged_frontier(phase: int) -> None:
    """Every third poll reads the cache at half, without a preemption (a scrape between two
    bursts); one of the phases puts such a poll where the frontier comes of age."""
    run = paid_climb()
    run.epoch(120, 1200, kv=1.0, preemptions=5)
    memory = PacerConfig().knee_memory_turnovers
    proposal = None
    while proposal is None:
        assert run.polls / POLLS_PER_EPOCH <= 4 + memory, "no recheck"
        low = (run.polls + phase) % 3 == 0
        reading, proposal = run.poll(
            120, tokens=1200, kv=0.5 if low else 1.0, preemptions=0 if low else 5
        )
        assert reading.signal is not Signal.HARD
    assert (proposal.kind, proposal.cause) == (DecisionKind.TRIM, Cause.FRONTIER)


def test_a_frontier_past_its_memory_that_holds_preemptions_is_rechecked_not_cut() -> None:
    _, proposal = held_at_the_frontier_past_its_memory()
    assert (proposal.kind, proposal.cause, proposal.shed) == (
        DecisionKind.TRIM,
        Cause.FRONTIER,
        False,
    )
    assert proposal.level == pytest.approx(120.0 / PacerConfig().frontier_growth)
    assert "to see whether it still pays" in proposal.detail


def recheck(tokens: int) -> list[Reading]:
    """The recheck's step under the frontier: the epoch the pool drains in, then a whole one
    at 104 making ``tokens`` a poll (the frontier's pool made 1,200)."""
    run, proposal = held_at_the_frontier_past_its_memory()
    level = proposal.level
    readings = [run.poll(112, level=level, tokens=tokens, kv=1.0, preemptions=5)[0]]
    while run.polls % POLLS_PER_EPOCH:
        readings.append(run.poll(104, level=level, tokens=tokens, kv=1.0, preemptions=5)[0])
    for _ in range(POLLS_PER_EPOCH):
        readings.append(run.poll(104, level=level, tokens=tokens, kv=1.0, preemptions=5)[0])
    return readings


def test_a_recheck_whose_smaller_pool_lost_throughput_keeps_the_frontier_and_regrows() -> None:
    readings = recheck(tokens=1050)  # 15 % fewer in flight, 12.5 % fewer tokens: it paid
    held, verdict = readings[:-1], readings[-1]
    assert all((r.signal, r.cause) == (Signal.SOFT, Cause.FRONTIER) for r in held)
    assert verdict.figures["frontier"] == pytest.approx(120.0)
    assert (verdict.signal, verdict.cause) == (Signal.CLEAR, Cause.FRONTIER)
    assert verdict.growth == pytest.approx(PacerConfig().frontier_growth)
    assert verdict.ceiling == pytest.approx(120.0)


def test_a_recheck_whose_smaller_pool_made_as_much_moves_the_frontier_down() -> None:
    readings = recheck(tokens=1190)  # 15 % fewer in flight, 1 % fewer tokens: it did not
    verdict = readings[-1]
    assert verdict.figures["frontier"] == pytest.approx(120.0 / PacerConfig().frontier_growth)
    # Held there through its preemptions: the smaller pool is now the one shown to pay.
    assert (verdict.signal, verdict.cause) == (Signal.SOFT, Cause.FRONTIER)


def test_a_recheck_held_over_its_step_by_the_bounds_lapses_and_forgets_the_frontier() -> None:
    """``min_inflight`` over the step keeps the cap at 120: the trim is asked for until the
    next epoch closes, no longer, and with no smaller epoch there is no verdict."""
    run, _ = held_at_the_frontier_past_its_memory()
    asked = []
    for _ in range(4 * POLLS_PER_EPOCH):
        reading, proposal = run.poll(120, tokens=1200, kv=1.0, preemptions=5)
        asked.append(proposal is not None and proposal.cause is Cause.FRONTIER)
    again = asked.index(False)
    assert again < POLLS_PER_EPOCH
    assert not any(asked[again:])
    assert "frontier" not in reading.figures


def test_a_recheck_survives_a_restart() -> None:
    run, _ = held_at_the_frontier_past_its_memory()
    stored = run.policy.to_json()
    assert stored["recheck"][:2] == pytest.approx([120.0, 1200 * POLLS_PER_EPOCH / 20.0])
    copy = PacerPolicy()
    copy.load_json(stored)
    assert copy.to_json() == stored


def test_a_persistent_queue_above_the_frontier_still_cuts() -> None:
    run = paid_climb()
    run.epoch(125, 1250, kv=0.5)  # not judged: nothing paid, the frontier stays at 120
    readings = [run.poll(130, kv=0.8, waiting_capacity=20, running=10)[0] for _ in range(3)]
    assert readings[-1].signal is Signal.HARD
    assert readings[-1].cause is Cause.QUEUE_OVERLOAD


def test_the_frontier_survives_a_restart() -> None:
    run = paid_climb()
    copy = PacerPolicy()
    copy.load_json(run.policy.to_json())
    assert copy.to_json() == run.policy.to_json()
    # The verdict did not survive (the new worker must earn it), the measured frontier did.
    again = Run(copy)
    again.polls = run.polls
    reading, proposal = again.poll(120, kv=1.0, preemptions=5)
    assert (reading.signal, reading.cause, proposal) == (Signal.SOFT, Cause.FRONTIER, None)


def test_under_the_frontier_the_cap_grows_back_to_it_through_preemptions() -> None:
    run = paid_climb()
    run.epoch(125, 1250, kv=0.5)  # not judged: the verdict lapses, the frontier stays at 120
    reading, proposal = run.poll(110, kv=1.0, preemptions=5)
    assert (reading.signal, reading.cause, proposal) == (Signal.CLEAR, Cause.FRONTIER, None)
    assert reading.growth == pytest.approx(PacerConfig().frontier_growth)
    assert reading.ceiling == pytest.approx(120.0)


def cut_from(inflight: int) -> Run:
    """An epoch at ``inflight``, then a preemption that no verdict excuses: a cut."""
    run = Run()
    run.epoch(inflight, 1000, kv=0.5)
    _, proposal = run.poll(inflight, kv=1.0, preemptions=5)
    assert proposal is not None and proposal.kind is DecisionKind.CUT
    return run


def test_a_cut_that_cost_throughput_in_proportion_drops_its_knee_for_a_frontier() -> None:
    run = cut_from(100)
    # The cut's epoch: 15 % fewer in flight for most of it and 10 % fewer tokens a poll, so
    # the pool fell 13 % and throughput 8 %: the larger pool paid.
    readings = [run.poll(85, tokens=900, kv=0.9)[0] for _ in range(3)]
    assert "knee" in readings[-2].figures
    assert "knee" not in readings[-1].figures
    assert readings[-1].figures["frontier"] == pytest.approx(100.0)
    assert (readings[-1].signal, readings[-1].cause) == (Signal.CLEAR, Cause.FRONTIER)
    assert readings[-1].ceiling == pytest.approx(100.0)


def test_a_cut_to_a_pool_that_leaves_the_cache_short_keeps_its_knee() -> None:
    run = cut_from(100)
    # As much lost as above, but the smaller pool left the cache at 60 %: it produced less
    # for want of episodes, which says nothing about what the preemptions cost.
    readings = [run.poll(85, tokens=900, kv=0.6)[0] for _ in range(3)]
    assert readings[-1].figures["knee"] == pytest.approx(100.0)
    assert "frontier" not in readings[-1].figures


def test_a_cut_that_cost_nothing_keeps_its_knee() -> None:
    run = cut_from(100)
    readings = [run.poll(85, tokens=1000, kv=0.9)[0] for _ in range(3)]  # as many tokens
    assert readings[-1].figures["knee"] == pytest.approx(100.0)
    assert "frontier" not in readings[-1].figures


def on_trial() -> Run:
    """An epoch at 100, then a pool 15 % larger past the trim line and preempting: a trial."""
    run = Run()
    run.epoch(100, 1000, kv=0.5)
    for _ in range(POLLS_PER_EPOCH - 1):
        reading, proposal = run.poll(115, kv=0.97, preemptions=5)
        assert (reading.signal, reading.cause, proposal) == (Signal.SOFT, Cause.PROBING, None)
    return run


def test_past_the_kv_line_a_pool_the_probe_can_judge_is_held_for_its_verdict_flat() -> None:
    run = on_trial()
    # The epoch closes flat: a suspect, held on trial for one more epoch, whose close confirms.
    for _ in range(POLLS_PER_EPOCH):
        reading, proposal = run.poll(115, tokens=1010, kv=0.97, preemptions=5)
        assert (reading.signal, reading.cause, proposal) == (Signal.SOFT, Cause.PROBING, None)
    _, proposal = run.poll(115, tokens=1010, kv=0.97, preemptions=5)
    assert proposal is not None
    assert (proposal.kind, proposal.cause) == (DecisionKind.TRIM, Cause.THROUGHPUT_FLAT)
    assert proposal.level == pytest.approx(100.0)


def test_past_the_kv_line_a_pool_the_probe_can_judge_is_held_for_its_verdict_paid() -> None:
    run = on_trial()
    reading, proposal = run.poll(115, tokens=1200, kv=0.97, preemptions=5)
    assert (reading.signal, reading.cause, proposal) == (
        Signal.CLEAR,
        Cause.THROUGHPUT_RISING,
        None,
    )
    assert reading.figures["frontier"] == pytest.approx(115.0)


def test_a_pool_too_close_to_the_anchor_for_a_verdict_is_trimmed_at_the_line() -> None:
    run = Run()
    run.epoch(100, 1000, kv=0.5)
    reading, proposal = run.poll(105, kv=0.97)
    assert (reading.signal, reading.cause) == (Signal.SOFT, Cause.KV_PRESSURE)
    assert proposal is not None
    assert proposal.kind is DecisionKind.TRIM
