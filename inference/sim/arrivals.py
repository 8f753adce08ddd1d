"""Requests handed to a virtual engine before they arrive, held until its clock reaches them.

Several engines on one virtual clock are advanced one at a time, so an engine can be given a
request that arrives later than its own clock says: a client reacting to a completion on an
engine that ran ahead, a trace replayed ahead of time. Until it arrives, the engine must not
see it at all: not queue it, not count it as waiting, not let a step or a fast-forwarded run
of decode steps admit it. So it waits here, in order of arrival (of submission among equal
times), and enters the engine's queue at the first step boundary at or after its arrival.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable

from inference.sim.request import FinishReason, Request


class Arrivals:
    """Prepared requests by arrival time; withdrawn ones are dropped where they lie."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Request]] = []
        self._held: dict[str, Request] = {}
        self._order = itertools.count()  # keeps submission order among equal arrival times

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, req_id: str) -> bool:
        return req_id in self._held

    def push(self, req: Request) -> None:
        if req.req_id in self._held:
            raise ValueError(f"request id {req.req_id!r} is already waiting to arrive")
        self._held[req.req_id] = req
        heapq.heappush(self._heap, (req.arrival_time, next(self._order), req))

    def next_time(self) -> float | None:
        """When the next held request arrives, if any is held."""
        self._drop_withdrawn()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[Request]:
        """The requests arriving at ``now`` or earlier, in order of arrival."""
        due = []
        while (arrival := self.next_time()) is not None and arrival <= now:
            req = heapq.heappop(self._heap)[2]
            del self._held[req.req_id]
            due.append(req)
        return due

    def withdraw(self, req_ids: Iterable[str]) -> list[Request]:
        """Drops held requests (unknown ids are ignored); they end aborted, never having arrived.

        The engine never saw them, so none of its counters does either; each ends at its
        arrival time, so that no latency computed from it is negative.
        """
        withdrawn = []
        for req_id in req_ids:
            req = self._held.pop(req_id, None)
            if req is None:
                continue
            req.status = FinishReason.ABORT.status
            req.finish_reason = FinishReason.ABORT
            req.finish_time = req.arrival_time
            withdrawn.append(req)
        return withdrawn

    def _drop_withdrawn(self) -> None:
        heap = self._heap
        while heap and self._held.get(heap[0][2].req_id) is not heap[0][2]:
            heapq.heappop(heap)
