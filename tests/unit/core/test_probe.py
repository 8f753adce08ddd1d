"""Throughput probing over turnover epochs."""

from __future__ import annotations

from tests.unit.core.builders import sample
from workers.core.policies.probe import EpochRate, ThroughputProbe
from workers.core.polls import PollSummary


def feed(probe: ThroughputProbe, epochs: list[tuple[int, int]], polls_per_epoch: int = 4):
    """Run whole epochs of (inflight, tokens per poll), polls 5 s apart; the verdicts."""
    verdicts = []
    at = 0.0
    probe.observe(PollSummary.from_samples([sample(tokens=0)], at), epochs[0][0], 0.0)
    for number, (inflight, tokens) in enumerate(epochs):
        for k in range(1, polls_per_epoch + 1):
            at += 5.0
            turnover = number + k / polls_per_epoch
            poll = PollSummary.from_samples([sample(tokens=tokens)], at)
            verdict = probe.observe(poll, inflight, turnover)
        verdicts.append(verdict)
    return verdicts


def test_a_larger_pool_that_buys_proportionally_more_tokens_is_not_flat() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    assert feed(probe, [(100, 1000), (120, 1200), (144, 1440)]) == [False, False, False]
    assert probe.anchor == EpochRate(144.0, 1440 * 4 / 20.0)


def test_a_larger_pool_with_the_same_throughput_is_flat() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    assert feed(probe, [(100, 1000), (120, 1040)]) == [False, True]


def test_no_verdict_until_the_pool_grew_by_the_step() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    assert feed(probe, [(100, 1000), (105, 1000), (108, 1000)]) == [False, False, False]
    assert probe.anchor is not None
    assert probe.anchor.inflight == 100


def test_a_smaller_pool_resets_the_anchor() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    feed(probe, [(100, 1000), (80, 700)])
    assert probe.anchor is not None
    assert probe.anchor.inflight == 80


def test_the_anchor_survives_a_restart_and_judges_the_next_epoch() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    feed(probe, [(100, 1000)])
    copy = ThroughputProbe(step=0.1, flat_gain=0.3)
    copy.load_json(probe.to_json())
    assert copy.anchor == probe.anchor
    assert feed(copy, [(120, 1040)]) == [True]
