"""The engine model on a virtual clock: an hour of traffic in seconds, in-process.

A virtual engine runs steps back to back while it has work, advancing its clock by each
step's modelled duration, and jumps over idle time. ``run_until`` returns as soon as a step
finishes requests, so a caller that reacts to completions (a closed-loop client, Pacer's
dispatcher) submits the follow-up work at the exact virtual time it would have in real time.

Requests may be submitted at any time not earlier than the start of the step in progress:
a request that arrives while a step runs waits for the next one, as in a real engine.
"""

from __future__ import annotations

import numpy as np

from inference.sim.engine import Engine
from inference.sim.request import Request
from inference.sim.sampling import SamplingParams


class VirtualEngine:
    """One engine and its clock."""

    def __init__(self, engine: Engine, start: float = 0.0, fast_forward: bool = True) -> None:
        self.engine = engine
        self.fast_forward = fast_forward  # apply runs of identical decode steps at once
        self.now = start  # when the engine may start its next step
        self._step_start = start  # start of the last step run: the past is fixed before it
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
        if not self.engine.has_unfinished_requests() and at > self.now:
            self.now = at
        return self.engine.add_request(req_id, prompt_token_ids, params, at)

    def abort(self, req_ids: list[str]) -> list[Request]:
        return self.engine.abort(req_ids, self.now)

    def run_until(self, until: float) -> list[Request]:
        """Runs steps that start before ``until``; returns at the first step that finishes any.

        Returns:
            The requests finished by the last step run (empty if none finished by ``until``).
            ``self.now`` is then that step's end, or ``until`` if the engine ran out of work.
        """
        while self.now < until:
            if not self.engine.has_unfinished_requests():
                self.now = until
                break
            if self.fast_forward:
                result = self.engine.step_until(self.now, until)
            else:
                result = self.engine.step(self.now)
            if result.is_idle:
                ready = self.engine.next_ready_time()
                self.now = until if ready is None else min(until, max(ready, self.now))
                continue
            self._step_start = result.start
            self.now = result.end
            self.num_steps += result.num_steps
            if result.finished:
                return result.finished
        return []
