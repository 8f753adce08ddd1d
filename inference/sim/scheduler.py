"""Continuous batching as vLLM's v1 scheduler does it, stepped by hand.

Every step hands out a token budget (``max_num_batched_tokens``): first to the running
requests in admission order (a decode takes one token, an unfinished prefill takes a chunk of
what is left), then, if no request was preempted this step, to waiting requests from the head
of the queue while there are batch slots (``max_num_seqs``), budget and KV blocks. A waiting
request is admitted only if its whole prompt fits in free blocks after its prefix-cache hit;
otherwise it keeps waiting (for capacity) and so does everything behind it. A running request
that needs a block when none is free preempts the most recently admitted running request:
its blocks are freed, its computed tokens reset to 0 (recompute, not swap) and it goes back
to the head of the queue, keeping the tokens it sampled.

The usual step is all decodes with enough free blocks; it runs as a handful of numpy
operations over the running batch. A step that must preempt serves the requests that fit the
same way, then walks the rest one request at a time: the literal form of the same rules.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable

import numpy as np

from inference.sim.batch import RunningBatch
from inference.sim.config import EngineConfig
from inference.sim.cost import chunk_pairs
from inference.sim.kv_manager import KVCacheManager
from inference.sim.output import SchedulerOutput, SchedulerStats, StepUpdate
from inference.sim.request import FinishReason, Request, RequestStatus


class PauseState(enum.Enum):
    """What a paused scheduler still runs, as vLLM 0.32's ``PauseState``."""

    UNPAUSED = "unpaused"
    PAUSED_NEW = "paused_new"  # running requests go on; nothing waiting is admitted
    PAUSED_ALL = "paused_all"  # nothing is scheduled: the batch is frozen


class Scheduler:
    """Queues, running batch and KV of one engine; no clock of its own, no I/O."""

    def __init__(self, config: EngineConfig, kv: KVCacheManager) -> None:
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.block_size = config.block_size
        self.kv = kv
        self.waiting: deque[Request] = deque()
        self.running = RunningBatch(config.max_num_seqs)
        self.requests: dict[str, Request] = {}  # every unfinished request, by id
        self.num_deferred = 0  # waiting requests whose grammar is still compiling
        self.pause_state = PauseState.UNPAUSED

    def add_request(self, req: Request) -> None:
        if req.req_id in self.requests:
            raise ValueError(f"request id {req.req_id!r} is already in the engine")
        if req.ready_time > req.arrival_time:
            req.status = RequestStatus.WAITING_FOR_FSM
            self.num_deferred += 1
        self.requests[req.req_id] = req
        self.waiting.append(req)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def has_schedulable_requests(self) -> bool:
        """Whether a step would run anything the pause state lets through.

        As vLLM's count of unfinished requests under a pause: none while frozen, only the
        running batch while new admissions are held; a drained pause is one where this is
        False although requests may be queued.
        """
        if self.pause_state is PauseState.PAUSED_ALL:
            return False
        if self.pause_state is PauseState.PAUSED_NEW:
            return bool(len(self.running))
        return bool(self.requests)

    def preempt_running(self) -> list[Request]:
        """Preempts the whole running batch by recompute, keeping its order in the queue.

        What vLLM's prefix-cache reset with ``reset_running_requests`` does, so that no block
        is held and the cache can be dropped.
        """
        preempted = []
        while len(self.running):
            preempted.append(self._preempt_one())
        return preempted

    def schedule(self, now: float) -> SchedulerOutput:
        """Chooses this step's batch. ``now`` is the step's start (for deferred requests)."""
        if self.pause_state is PauseState.PAUSED_ALL:
            empty = np.zeros(len(self.running), dtype=np.int64)
            return SchedulerOutput(empty, 0, 0, 0, 0, [], [])
        token_budget = self.max_num_batched_tokens
        num_running_tokens, token_budget, preempted = self._schedule_running(token_budget)
        admitted: list[Request] = []
        num_admitted_tokens: list[int] = []
        if not preempted and self.pause_state is PauseState.UNPAUSED:
            token_budget = self._schedule_waiting(token_budget, now, admitted, num_admitted_tokens)
        num_scheduled = np.concatenate(
            [num_running_tokens, np.asarray(num_admitted_tokens, dtype=np.int64)]
        )
        n = len(self.running)
        computed = self.running.num_computed[:n]
        num_batched = int(num_scheduled.sum())
        num_seqs = int(np.count_nonzero(num_scheduled))
        if num_seqs == n:
            num_context = int(computed.sum()) + num_batched
        else:
            num_context = int(computed[num_scheduled > 0].sum()) + num_batched
        output = SchedulerOutput(
            num_scheduled_tokens=num_scheduled,
            num_batched_tokens=num_batched,
            num_seqs=num_seqs,
            num_context_tokens=num_context,
            num_attention_pairs=chunk_pairs(num_scheduled, computed),
            admitted=admitted,
            preempted=preempted,
        )
        self._check_invariants(token_budget, output)
        return output

    def update_from_output(self, output: SchedulerOutput, now: float) -> StepUpdate:
        """Applies a step that ran ``output``: advances counters, samples, finishes requests."""
        batch = self.running
        n = len(batch)
        num_scheduled = output.num_scheduled_tokens
        if len(num_scheduled) != n:
            raise ValueError(f"output is for {len(num_scheduled)} running requests, not {n}")
        computed = batch.num_computed[:n]
        computed += num_scheduled
        num_tokens = batch.num_tokens[:n]
        sampled = (num_scheduled > 0) & (computed == num_tokens)
        num_tokens += sampled
        first = sampled & (num_tokens - batch.num_prompt[:n] == 1)
        done = sampled & (num_tokens == batch.max_num_tokens[:n])
        first_token = [batch.reqs[pos] for pos in np.flatnonzero(first).tolist()]
        for req in first_token:
            req.first_token_time = now
        finished = batch.remove(np.flatnonzero(done))
        for req in finished:
            self.retire(req, req.final_reason, now)
        return StepUpdate(int(sampled.sum()), first_token, finished)

    def finish_requests(self, req_ids: Iterable[str], now: float) -> list[Request]:
        """Aborts requests wherever they are, freeing their blocks; unknown ids are ignored."""
        aborted = []
        for req_id in req_ids:
            req = self.requests.get(req_id)
            if req is None:
                continue
            if req.batch is not None:
                self.running.remove(np.asarray([req.batch_pos]))
            else:
                self.waiting.remove(req)
                if req.status is RequestStatus.WAITING_FOR_FSM:
                    self.num_deferred -= 1
            self.retire(req, FinishReason.ABORT, now)
            aborted.append(req)
        return aborted

    def make_stats(self) -> SchedulerStats:
        return SchedulerStats(
            num_running_reqs=len(self.running),
            num_waiting_reqs=len(self.waiting) - self.num_deferred,
            num_deferred_reqs=self.num_deferred,
            kv_cache_usage=self.kv.usage(),
        )

    def _schedule_running(self, token_budget: int) -> tuple[np.ndarray, int, list[Request]]:
        """Budget and blocks for running requests, front to back.

        The leading requests whose blocks fit in the free ones are served in a few array
        operations; from the first one that does not fit, the walk goes one request at a time,
        preempting from the back (the literal form of the same rules).
        """
        batch = self.running
        n = len(batch)
        computed = batch.num_computed[:n]
        wanted = batch.num_tokens[:n] - computed
        if int(wanted.sum()) <= token_budget:
            num_new = wanted
        else:
            before = np.cumsum(wanted) - wanted
            num_new = np.clip(token_budget - before, 0, wanted)
        round_up = self.block_size - 1
        num_blocks_needed = (computed + num_new + round_up) // self.block_size - (
            computed + round_up
        ) // self.block_size
        fits = int(
            np.searchsorted(np.cumsum(num_blocks_needed), self.kv.num_free_blocks, side="right")
        )
        positions = np.flatnonzero(num_blocks_needed[:fits])
        if len(positions):
            self.kv.append_blocks(
                [batch.reqs[pos] for pos in positions.tolist()],
                num_blocks_needed[positions].tolist(),
            )
        prefilling = (num_new[:fits] > 0) & (computed[:fits] < batch.num_prompt[:fits])
        if prefilling.any():
            for pos in np.flatnonzero(prefilling).tolist():
                self.kv.register_prompt_blocks(batch.reqs[pos], int(computed[pos] + num_new[pos]))
        token_budget -= int(num_new[:fits].sum())
        if fits == n:
            return num_new, token_budget, []
        return self._schedule_running_one_by_one(token_budget, num_new[:fits].tolist())

    def _schedule_running_one_by_one(
        self, token_budget: int, scheduled: list[int]
    ) -> tuple[np.ndarray, int, list[Request]]:
        """The rules one request at a time, after the ``scheduled`` leading ones."""
        batch = self.running
        preempted: list[Request] = []
        while len(scheduled) < len(batch) and token_budget > 0:
            pos = len(scheduled)
            req = batch.reqs[pos]
            num_new = min(int(batch.num_tokens[pos] - batch.num_computed[pos]), token_budget)
            while self.kv.allocate_slots(req, num_new) is None:
                victim = self._preempt_one()
                preempted.append(victim)
                if victim is req:
                    break
            if req.batch is None:
                break
            scheduled.append(num_new)
            token_budget -= num_new
        num_new_tokens = np.zeros(len(batch), dtype=np.int64)
        num_new_tokens[: len(scheduled)] = scheduled
        return num_new_tokens, token_budget, preempted

    def _preempt_one(self) -> Request:
        """Preempts the most recently admitted running request by recompute."""
        req = self.running.pop()
        self.kv.free(req)
        req.set_counters(0, req.num_output_tokens)
        req.status = RequestStatus.PREEMPTED
        req.num_preemptions += 1
        self.waiting.appendleft(req)
        return req

    def _schedule_waiting(
        self, token_budget: int, now: float, admitted: list[Request], num_tokens: list[int]
    ) -> int:
        """Admits from the head of the queue; stops at the first request that does not fit."""
        deferred: list[Request] = []
        while self.waiting and token_budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            if req.status is RequestStatus.WAITING_FOR_FSM:
                if req.ready_time > now:
                    deferred.append(self.waiting.popleft())
                    continue
                req.status = RequestStatus.WAITING
                self.num_deferred -= 1
            hit_blocks, num_hit_tokens = self.kv.get_computed_blocks(req)
            num_new = min(req.num_tokens - num_hit_tokens, token_budget)
            if (
                self.kv.allocate_slots(req, num_new, hit_blocks, full_sequence_must_fit=True)
                is None
            ):
                break
            self.waiting.popleft()
            self._admit(req, num_hit_tokens, now)
            admitted.append(req)
            num_tokens.append(num_new)
            token_budget -= num_new
        self.waiting.extendleft(reversed(deferred))
        return token_budget

    def _admit(self, req: Request, num_hit_tokens: int, now: float) -> None:
        self.kv.record_prefix_cache_stats(req, num_hit_tokens)
        if req.scheduled_time is None:
            req.scheduled_time = now
            req.num_cached_prompt_tokens = num_hit_tokens
        req.set_counters(num_hit_tokens, req.num_output_tokens)
        req.status = RequestStatus.RUNNING
        self.running.append(req)

    def retire(self, req: Request, reason: FinishReason, now: float) -> None:
        """Ends a request that has left the queues: frees its blocks, records why and when."""
        self.kv.free(req)
        self.kv.free_block_hashes(req)
        del self.requests[req.req_id]
        req.status = reason.status
        req.finish_reason = reason
        req.finish_time = now

    def _check_invariants(self, token_budget: int, output: SchedulerOutput) -> None:
        assert token_budget >= 0, token_budget
        assert len(self.running) <= self.max_num_seqs, len(self.running)
        assert output.num_batched_tokens == self.max_num_batched_tokens - token_budget
        pool = self.kv.pool
        assert pool.num_held_blocks + pool.num_free_blocks == pool.num_usable_blocks
