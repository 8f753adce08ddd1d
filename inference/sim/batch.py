"""The running batch: requests in admission order, their counters as parallel numpy arrays.

vLLM keeps ``self.running`` as a list and walks it every step. A step here must touch hundreds
of requests thousands of times per simulated minute, so the counters that change every step
(computed tokens, tokens so far) live in arrays indexed by position in the batch, and a step
updates them all in a few vectorised operations. Order matters as in vLLM: the token budget is
handed out front to back and preemption takes from the back (the most recently admitted).
"""

from __future__ import annotations

import numpy as np

from inference.sim.request import Request


class RunningBatch:
    """Running requests and their per-position counters; at most ``capacity`` of them."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.reqs: list[Request] = []
        self.num_computed = np.zeros(capacity, dtype=np.int64)
        self.num_tokens = np.zeros(capacity, dtype=np.int64)
        self.num_prompt = np.zeros(capacity, dtype=np.int64)
        self.max_num_tokens = np.zeros(capacity, dtype=np.int64)  # prompt + final output length

    def __len__(self) -> int:
        return len(self.reqs)

    def append(self, req: Request) -> None:
        """Moves a request's counters into the arrays; it becomes the newest position."""
        pos = len(self.reqs)
        if pos >= self.capacity:
            raise ValueError(f"running batch is full ({self.capacity} requests)")
        self.num_computed[pos] = req.num_computed_tokens
        self.num_tokens[pos] = req.num_tokens
        self.num_prompt[pos] = req.num_prompt_tokens
        self.max_num_tokens[pos] = req.num_prompt_tokens + req.max_output_tokens
        self.reqs.append(req)
        req.batch = self
        req.batch_pos = pos

    def pop(self) -> Request:
        """Removes the newest request, handing its counters back to it."""
        req = self.reqs.pop()
        self._detach(req, len(self.reqs))
        return req

    def remove(self, positions: np.ndarray) -> list[Request]:
        """Removes the requests at ``positions`` (ascending) and closes the gaps, keeping order."""
        if len(positions) == 0:
            return []
        n = len(self.reqs)
        removed = [self.reqs[pos] for pos in positions.tolist()]
        for req in removed:
            self._detach(req, req.batch_pos)
        keep = np.ones(n, dtype=bool)
        keep[positions] = False
        m = n - len(removed)
        for array in (self.num_computed, self.num_tokens, self.num_prompt, self.max_num_tokens):
            array[:m] = array[:n][keep]
        first = int(positions[0])
        self.reqs = [req for req in self.reqs if req.batch is self]
        for pos in range(first, m):
            self.reqs[pos].batch_pos = pos
        return removed

    def _detach(self, req: Request, pos: int) -> None:
        num_computed = int(self.num_computed[pos])
        num_output = int(self.num_tokens[pos] - self.num_prompt[pos])
        req.batch = None
        req.batch_pos = -1
        req.set_counters(num_computed, num_output)
