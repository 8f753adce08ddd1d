"""Environments wrapped so that every episode's generated tokens are counted, however it ends.

The wrapper runs the project's own environment unchanged; it only opens a tally in the
episode's task (a context variable the virtual clients add each turn's tokens to) and, when
the episode is cancelled or fails, books the tally as waste: tokens the engines generated
that no batch will ever use. While the episode runs, its tally is in the run's episodes in
flight, whose tokens so far the recorder reads at every poll.
"""

from __future__ import annotations

from typing import ClassVar

from bench.virtual.engines import EpisodeTokens, InFlight, Waste, current_episode
from workers.core.config.fields import Table
from workers.core.environments.base import Environment, Episode, Session


class Tallied:
    """An environment whose episodes' tokens are tallied; it runs ``inner`` as it is."""

    name: ClassVar[str] = "tallied"

    def __init__(self, inner: Environment, waste: Waste, in_flight: InFlight) -> None:
        self.inner = inner
        self._waste = waste
        self._in_flight = in_flight

    @classmethod
    def from_args(cls, args: Table) -> Tallied:
        raise TypeError("Tallied wraps an environment already built; it has no args")

    async def run(self, session: Session, task_seed: int) -> Episode:
        tally = EpisodeTokens()
        current_episode.set(tally)
        self._in_flight.episodes.add(tally)
        try:
            return await self.inner.run(session, task_seed)
        except BaseException:
            self._waste.tokens += tally.tokens
            raise
        finally:
            self._in_flight.episodes.discard(tally)
