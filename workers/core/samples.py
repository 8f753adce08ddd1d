"""Facts the controller reads about the engines, one record per engine per poll.

The engine monitor (``inference.metrics``) produces these from each engine's ``/metrics``
and ``/v1/models``; the controller consumes them. Keeping the contract here, in the pure
core, lets the real monitor, the simulator and the tests all feed the controller the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


def endpoint_of(engine_id: str) -> str:
    """The configured engine an engine id belongs to: ``name/rank`` ids are data-parallel
    ranks behind one server, which routing treats as one engine."""
    return engine_id.split("/", 1)[0]


class EngineRole(StrEnum):
    """Which phase an engine serves; overload signals read decode and unified engines only."""

    UNIFIED = "unified"  # prefill and decode on one engine, the usual vLLM deployment
    PREFILL = "prefill"  # disaggregated prefill: its queue is normal flow, never overload
    DECODE = "decode"  # disaggregated decode: holds the KV of running episodes


class EngineHealth(StrEnum):
    """What the last scrapes of an engine say about it."""

    UP = "up"  # the last scrape succeeded
    STALE = "stale"  # the last scrape failed, earlier ones succeeded: numbers are old
    DOWN = "down"  # no scrape has succeeded for longer than the down bound, or ever


@dataclass(frozen=True, slots=True)
class LoadSample:
    """One engine's load as seen by one poll.

    Counters are already turned into deltas since the previous poll; an engine that restarted
    (its counters' created stamps changed, or a counter went backwards) is reported as
    ``restarted`` with zero deltas, never as a signal. A sample whose
    ``health`` is not ``UP`` carries the last good gauges and zero deltas: a stale engine must
    never make the pool look clear.
    """

    engine_id: str  # endpoint name, plus "/<engine label>" when the engine labels its series
    role: EngineRole
    scraped_at: float  # clock seconds of the scrape these numbers come from
    health: EngineHealth
    kv_capacity_tokens: int | None  # KV cache size in tokens; None until the engine reports it
    max_model_len: int | None  # from /v1/models; None until it has been read
    kv_usage: float  # fraction of KV blocks in use, 0..1
    num_running: int  # requests in the running batch
    num_waiting: int  # requests queued, all reasons
    num_waiting_capacity: int | None  # queued for lack of KV/batch room; None if not reported
    num_preemptions: int  # preemptions since the previous poll
    prefix_cache_hits: int  # prefix-cache hit tokens since the previous poll
    prefix_cache_queries: int  # prefix-cache queried tokens since the previous poll
    generation_tokens: int  # tokens generated since the previous poll
    restarted: bool = False  # restarted since the previous poll (created stamps, counters)
    # Paused by the run for a weight update, or just resumed from one (the run's relay says
    # so, not the monitor): its numbers describe a pause and a cold cache, not a load, so
    # the controller leaves them out, and counts the engine as neither stale nor idle.
    updating: bool = False

    @property
    def endpoint(self) -> str:
        return endpoint_of(self.engine_id)

    @property
    def is_fresh(self) -> bool:
        return self.health is EngineHealth.UP

    @property
    def capacity_waiters(self) -> int:
        """Requests queued for lack of room. An engine without the breakdown by reason may
        be queueing for capacity with all of them, so none of its waiters is assumed benign."""
        return self.num_waiting if self.num_waiting_capacity is None else self.num_waiting_capacity

    @property
    def reads_overload(self) -> bool:
        """Whether this engine's queue and preemptions count as overload signals."""
        return self.role is not EngineRole.PREFILL
