"""The KV one of a run's episodes holds: what each episode's turns held over its time in
flight, after a warm-up of the run's first (shortest) episodes."""

from __future__ import annotations

import pytest

from tests.unit.orchestrator.fakes import WordEngine
from workers.core.clock import ManualClock
from workers.core.dispatch.episodes import EpisodeTicket, FinishedEpisode
from workers.core.dispatch.permits import EpisodeKind, PermitOutcome
from workers.core.environments.base import Episode, Sampling, Session
from workers.core.orchestrator.footprint import FOOTPRINT_EPISODES, KvFootprint
from workers.core.orchestrator.groups import EpisodeSpec
from workers.core.turns import Turn, TurnResult


async def test_an_episode_counts_the_kv_its_turns_held_its_groups_prompt_shared() -> None:
    clock = ManualClock()

    class TwoSecondTurns(WordEngine):
        async def complete(self, turn: Turn) -> TurnResult:
            clock.advance(2.0)
            return await super().complete(turn)

    talk = Session(TwoSecondTurns(words=4), Sampling(), seed=1, clock=clock, group_size=4)
    await talk.prompt("a b c d e f g")  # 8 tokens with BOS, 6 of them the group's others'
    await talk.generate()  # 4 tokens in 2 s
    await talk.observe("h i")
    await talk.generate()  # from a context of 14
    episode = talk.finish(reward=0.0)
    assert episode.kv_token_seconds == pytest.approx((8 - 6 + 4 / 2) * 2 + (14 - 6 + 4 / 2) * 2)


def finished(token_seconds: float, seconds: float, outcome=PermitOutcome.COMPLETED):
    ticket = EpisodeTicket("g", 0, EpisodeKind.TRAIN, "env", 0, EpisodeSpec("env", 1, 2))
    episode = Episode((), (), (), 0.0, 1, kv_token_seconds=token_seconds)
    return FinishedEpisode(ticket, "e0", outcome, 0.0, seconds, 1, episode, None, None)


def test_the_footprint_is_token_seconds_over_time_in_flight_after_a_warm_up() -> None:
    footprint = KvFootprint()
    for _ in range(FOOTPRINT_EPISODES):
        footprint.add(finished(10.0, 10.0))  # the warm-up's short ones: 1 token each
    assert footprint.tokens is None
    footprint.add(finished(6_000.0, 10.0))
    footprint.add(finished(2_000.0, 10.0))
    footprint.add(finished(0.0, 5.0, PermitOutcome.CANCELLED))  # measured nothing
    keep = 1 - 1 / FOOTPRINT_EPISODES  # the older episode weighs a little less
    assert footprint.tokens == pytest.approx((6_000 * keep + 2_000) / (10 * keep + 10))
