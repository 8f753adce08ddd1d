"""Records the scheduler hands out: what one step runs, what it produced, the queue state.

As in vLLM, the scheduler returns data and never touches metrics or clients: the engine turns
these into step times and counters, the server into streamed tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inference.sim.request import Request


@dataclass(frozen=True, slots=True)
class SchedulerOutput:
    """One step's batch. ``num_scheduled_tokens[i]`` is for the request at batch position i."""

    num_scheduled_tokens: np.ndarray  # per running position after scheduling; 0 = not this step
    num_batched_tokens: int  # sum of the above: the step's share of the token budget
    num_seqs: int  # requests with at least one token this step
    num_context_tokens: int  # KV tokens the step reads: each scheduled request's context
    num_attention_pairs: int  # token pairs its prefill chunks attend (cost.chunk_pairs)
    admitted: list[Request]  # moved from waiting to running this step
    preempted: list[Request]  # moved from running back to the head of waiting


@dataclass(frozen=True, slots=True)
class StepUpdate:
    """What a step produced, from ``update_from_output``."""

    num_generated_tokens: int  # tokens sampled this step
    first_token: list[Request]  # requests that sampled their first output token
    finished: list[Request]  # requests that reached their planned output length


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """Queue and cache state after a step, with vLLM's split of the waiting queue."""

    num_running_reqs: int
    num_waiting_reqs: int  # waiting for capacity: KV blocks, batch slots or token budget
    num_deferred_reqs: int  # waiting on something else (here: grammar compilation)
    kv_cache_usage: float  # fraction of usable blocks held, 0..1
