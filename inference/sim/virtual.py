"""The engine model on a virtual clock: an hour of traffic in seconds, in-process.

A virtual engine runs steps back to back while it has work, advancing its clock by each
step's modelled duration, and jumps over idle time. ``run_until`` returns as soon as a step
finishes requests, so a caller that reacts to completions (a closed-loop client, Pacer's
dispatcher) submits the follow-up work at the exact virtual time it would have in real time.

A request arrives at the time it is submitted for, never earlier. One arriving while a step
runs waits for the next one, as in a real engine. One arriving after the engine's clock waits
in ``arrivals`` until the clock reaches it: no step, fast-forwarded or not, starts before an
arrival it has not seen. One arriving while the engine idled (after its last step, before the
clock that ``run_until`` moved on through idle time) starts the next step at its arrival, as
no step ran in between. Only the start of the last step run is fixed: nothing may arrive
before it.

Several engines share one virtual clock if the driver always advances the engine whose clock
is earliest, and only up to the next engine's clock (``run_until(other.now)``, or one step
when they are level): every step then starts before anything another engine produces later,
so a request one engine's completion sends to another is never in that one's fixed past.
"""

from __future__ import annotations

import numpy as np

from inference.sim.arrivals import Arrivals
from inference.sim.engine import Engine
from inference.sim.request import Request
from inference.sim.sampling import SamplingParams


class VirtualEngine:
    """One engine, its clock and the requests that have not arrived yet."""

    def __init__(self, engine: Engine, start: float = 0.0, fast_forward: bool = True) -> None:
        self.engine = engine
        self.fast_forward = fast_forward  # apply runs of identical decode steps at once
        self.now = start  # when the engine may start its next step
        self._step_start = start  # start of the last step run: the past is fixed before it
        self._step_end = start  # end of the last step run: the engine idled from there to now
        self.arrivals = Arrivals()
        self.num_steps = 0

    def submit(
        self, req_id: str, prompt_token_ids: np.ndarray, params: SamplingParams, at: float
    ) -> Request:
        """Adds a request arriving at virtual time ``at``; raises RequestError if invalid."""
        if at < self._step_start:
            raise ValueError(
                f"request {req_id} arrives at {at:.6f}, before the step in progress "
                f"started ({self._step_start:.6f}): the virtual past cannot change"
            )
        if req_id in self.arrivals or self.engine.has_request(req_id):
            raise ValueError(f"request id {req_id!r} is already in the engine")
        req = self.engine.prepare_request(req_id, prompt_token_ids, params, at)
        if at > self.now:
            self.arrivals.push(req)
            return req
        # The next step starts at the first step boundary at or after the arrival: the end of
        # the step it arrived during, or the arrival itself if the engine was idle then.
        self.now = max(at, self._step_end)
        self._queue_arrivals(at)  # held ones that arrived earlier go ahead of it
        self.engine.queue_request(req)
        return req

    def abort(self, req_ids: list[str]) -> list[Request]:
        """Cancels requests, arrived or not; one that has not arrived never reaches the engine."""
        withdrawn = self.arrivals.withdraw(req_ids)
        return withdrawn + self.engine.abort(req_ids, self.now)

    def run_until(self, until: float) -> list[Request]:
        """Runs steps that start before ``until``; returns at the first step that finishes any.

        Requests arriving up to each step's start join the queue before it; a run of decode
        steps stops at the next arrival, so that the arrival's step can admit it.

        Returns:
            The requests finished by the last step run (empty if none finished by ``until``).
            ``self.now`` is then that step's end, or ``until`` if the engine ran out of work.
        """
        while self.now < until:
            self._queue_arrivals(self.now)
            next_arrival = self.arrivals.next_time()
            horizon = until if next_arrival is None else min(until, next_arrival)
            if not self.engine.has_unfinished_requests():
                self.now = horizon
                continue
            if self.fast_forward:
                result = self.engine.step_until(self.now, horizon)
            else:
                result = self.engine.step(self.now)
            if result.is_idle:
                ready = self.engine.next_ready_time()
                self.now = horizon if ready is None else min(horizon, max(ready, self.now))
                continue
            self._step_start, self._step_end = result.start, result.end
            self.now = result.end
            self.num_steps += result.num_steps
            if result.finished:
                return result.finished
        return []

    def _queue_arrivals(self, now: float) -> None:
        for req in self.arrivals.pop_due(now):
            self.engine.queue_request(req)
