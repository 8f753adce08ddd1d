"""The KV cache one of the run's episodes holds, on average over its time in flight.

A pool of shared engines splits its KV cache between runs (``workers.core.sharing``), but a
run holds episodes: to turn one into the other, each run states its footprint. vLLM reports KV
usage per engine, not per request, so the footprint is measured from the run's own episodes:
each finished episode tells the token-seconds its requests held (``Episode.kv_token_seconds``)
and how long it was in flight; by Little's law their ratio, over recent episodes, times the
episodes in flight is what the run holds. An agentic episode that waits on its tools holds
nothing meanwhile (its context is only cached), so it weighs less than its length says.
"""

from __future__ import annotations

from workers.core.dispatch.episodes import FinishedEpisode
from workers.core.dispatch.permits import PermitOutcome
from workers.core.environments.base import Episode
from workers.core.orchestrator.groups import EpisodeSpec

# The footprint follows about the last 200 episodes: a turnover or two of a typical pool, so
# one long episode barely moves it, and answers that grow longer as the policy learns are
# followed within minutes. A run's first 200 are its warm-up and measure nothing: the first
# episodes to finish are its shortest (the long ones are still running), and would make it
# look lighter than it is.
FOOTPRINT_EPISODES = 200


class KvFootprint:
    __slots__ = ("_seconds", "_token_seconds", "_warming")

    def __init__(self) -> None:
        self._token_seconds = 0.0
        self._seconds = 0.0
        self._warming = FOOTPRINT_EPISODES

    def add(self, finished: FinishedEpisode[EpisodeSpec, Episode]) -> None:
        """One episode that left the pool; only completed ones measured anything."""
        episode, seconds = finished.result, finished.finished_at - finished.started_at
        if finished.outcome is not PermitOutcome.COMPLETED or episode is None or seconds <= 0:
            return
        if self._warming:
            self._warming -= 1
            return
        keep = 1.0 - 1.0 / FOOTPRINT_EPISODES
        self._token_seconds = self._token_seconds * keep + episode.kv_token_seconds
        self._seconds = self._seconds * keep + seconds

    @property
    def tokens(self) -> float | None:
        """KV tokens one episode in flight holds on average; None before any finished."""
        return self._token_seconds / self._seconds if self._token_seconds > 0 else None
