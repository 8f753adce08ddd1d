"""Runs of identical decode steps, applied at once (virtual time only).

Most steps of a busy engine are alike: every running request decodes one token, nobody can be
admitted (the queue is empty or the batch is full), nobody finishes, no block runs out. A run
of k such steps has a closed form: every counter advances by k, step i reads k more context
than step i-1, and the blocks the run needs are taken from the free queue in the order the
steps would have taken them (by step, then by batch position). The run stops at the first
step that finishes a request, so that step's effects (a free slot, freed blocks) reach the
scheduler exactly when they would have. The result equals stepping k times; the scheduler
tests check that against the step-by-step path.
"""

from __future__ import annotations

import numpy as np

from inference.sim.cost import StepCost
from inference.sim.output import StepUpdate
from inference.sim.scheduler import Scheduler


def max_decode_run(scheduler: Scheduler) -> int:
    """Steps from now that are certainly plain decodes of the current batch (0: none)."""
    batch = scheduler.running
    n = len(batch)
    if n == 0 or n > scheduler.max_num_batched_tokens or scheduler.num_deferred:
        return 0
    if scheduler.waiting and n < scheduler.max_num_seqs:
        return 0  # someone might be admitted: let the step decide
    computed = batch.num_computed[:n]
    num_tokens = batch.num_tokens[:n]
    if not np.array_equal(num_tokens - computed, np.ones(n, dtype=np.int64)):
        return 0  # a prefill chunk is pending
    if (num_tokens <= batch.num_prompt[:n]).any():
        return 0  # a prefill's last token is pending: its step samples a first token
    steps = int((batch.max_num_tokens[:n] - num_tokens).min())  # the last step finishes one
    free = scheduler.kv.num_free_blocks
    while steps > 1 and _num_blocks_needed(computed, steps, scheduler.block_size).sum() > free:
        steps //= 2
    return steps


def run_times(cost: StepCost, num_seqs: int, num_context: int, steps: int) -> np.ndarray:
    """Duration of each step of a decode run; ``num_context`` is the context before it.

    The terms are added in ``StepCost.step_time``'s order, so the floats are the same.
    """
    per_step = (
        cost.step_overhead_s + cost.per_batched_token_s * num_seqs + cost.per_seq_s * num_seqs
    )
    context = num_context + num_seqs * np.arange(1, steps + 1, dtype=np.float64)
    return per_step + cost.per_context_token_s * context


def advance_decode_run(scheduler: Scheduler, steps: int, now: float) -> StepUpdate:
    """Applies ``steps`` decode steps (from ``max_decode_run``); the last one ends at ``now``."""
    batch = scheduler.running
    n = len(batch)
    block_size = scheduler.block_size
    computed = batch.num_computed[:n]
    needed = _num_blocks_needed(computed, steps, block_size)
    total = int(needed.sum())
    if total:
        # The step at which each request takes each new block: a block is needed when the
        # token computed is the first of a block.
        first_step = (-computed) % block_size + 1
        positions = np.repeat(np.arange(n), needed)
        nth = np.arange(total) - np.repeat(np.cumsum(needed) - needed, needed)
        at_step = np.repeat(first_step, needed) + nth * block_size
        order = np.lexsort((positions, at_step))
        new_blocks = scheduler.kv.pool.get_new_blocks(total)
        reqs = batch.reqs
        block_lists = scheduler.kv.req_to_blocks
        for pos, block_id in zip(positions[order].tolist(), new_blocks, strict=True):
            block_lists[reqs[pos].req_id].append(block_id)
    computed += steps
    num_tokens = batch.num_tokens[:n]
    num_tokens += steps
    done = np.flatnonzero(num_tokens == batch.max_num_tokens[:n])
    finished = batch.remove(done)
    for req in finished:
        scheduler.retire(req, req.final_reason, now)
    return StepUpdate(n * steps, [], finished)


def _num_blocks_needed(computed: np.ndarray, steps: int, block_size: int) -> np.ndarray:
    round_up = block_size - 1
    return (computed + steps + round_up) // block_size - (computed + round_up) // block_size
