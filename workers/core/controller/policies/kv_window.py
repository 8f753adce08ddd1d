"""The KV usage of a pool's last few polls, and what one more episode would make of it.

Growth reads the highest usage of the last ``confirm_polls`` polls, not the last alone: a
single scrape of a real vLLM engine can catch it idle mid-load. Each reading is kept with the
requests per engine running in it, so that it can be priced by what filled it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from workers.core.controller.polls import PollSummary
from workers.core.validation import stored_numbers, stored_usages


class KvWindow:
    """The recent polls' KV usage, each with the requests per engine that were running."""

    def __init__(self, polls: int) -> None:
        self._readings: deque[tuple[float, float]] = deque(maxlen=polls)

    def add(self, poll: PollSummary) -> None:
        self._readings.append((poll.max_kv_usage, poll.running / max(1, poll.engines)))

    def highest(self) -> float:
        """The highest usage the window read, as measured: 0.0 before any poll."""
        return max((kv for kv, _ in self._readings), default=0.0)

    def one_more(self, inflight: int, engines: int, *, by_running: bool) -> float:
        """The highest recent usage, priced with one more episode's share of it: in a small
        pool one episode is a step wider than the dead band, and growing into it would cross
        the trim line at once. The share is of the fullest engine, which holds about
        ``inflight / engines`` episodes; slow start prices it against that count.
        ``by_running`` prices each poll by the requests running in it instead, for regrowth
        toward a size that overloaded: a pool that just grew has not yet filled the cache its
        size will, and an episode between turns holds no KV at a poll but may run the next
        moment (the real engine's closed loop, cut to 6 on a cache of 8, grew to 9 and
        preempted on KV priced against the in-flight count)."""
        now = inflight / max(1, engines)

        def priced(kv: float, running: float) -> float:
            count = running if by_running else now
            return kv if count == 0 else kv * (now + 1) / count

        return min(1.0, max(priced(kv, running) for kv, running in self._readings))

    def to_json(self) -> dict[str, Any]:
        return {
            "recent_kv": [kv for kv, _ in self._readings],
            "recent_running": [running for _, running in self._readings],
        }

    def load_json(self, data: Mapping[str, Any]) -> None:
        """A state saved before the readings kept their running counts restarts the window
        empty (such a reading cannot be priced), and the next poll refills it."""
        usages = stored_usages(data, "recent_kv")
        self._readings.clear()
        if "recent_running" not in data:
            return
        running = stored_numbers(data, "recent_running", low=0.0)
        if len(running) != len(usages):
            raise ValueError(
                f"recent_running must have one count per recent_kv reading, got "
                f"{len(running)} for {len(usages)}"
            )
        self._readings.extend(zip(usages, running, strict=True))


def all_running_kv(poll: PollSummary, inflight: int) -> float:
    """The KV usage the pool's episodes fill when all of them run at once: the poll's usage
    scaled from the requests running to the episodes in flight. Some are between turns at any
    poll (a tool call, the client's round trip), holding no KV then but all of it later."""
    kv, running = poll.max_kv_usage, poll.running
    return kv if running == 0 else min(1.0, kv * inflight / running)
