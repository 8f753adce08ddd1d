"""One poll of every engine, reduced to the pool-wide numbers the policies read.

Overload figures come from fresh decode and unified engines only: a prefill engine's queue is
normal flow, and a stale engine's numbers are old. Stale engines are counted, so that a poll
with one of them is known to be incomplete and never reads as clear; down engines have left the
pool and count for nothing, not even capacity. Engines updating their weights (paused by the
run, or just resumed) stay in the pool's capacity but give no numbers: their empty batch is no
sign of room, their scrape failing no sign of staleness, their cold prefix cache no eviction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from workers.core.samples import EngineHealth, LoadSample


@dataclass(frozen=True, slots=True)
class PollSummary:
    """Pool-wide figures of one poll, over the engines whose numbers count as overload signals."""

    at: float  # clock seconds when the controller received the poll
    fresh: int  # decode/unified engines scraped successfully
    stale: int  # decode/unified engines whose scrape failed: numbers are old
    down: int  # decode/unified engines out of the pool
    max_kv_usage: float  # highest KV usage among fresh engines
    running: int  # requests in the running batches of fresh engines
    waiting: int  # requests queued for any reason on fresh engines
    waiting_capacity: int  # queued for lack of room; an engine without the breakdown counts all
    preemptions: int  # preemptions since the previous poll, fresh engines
    waiting_engines: frozenset[str]  # fresh engines with at least one waiting request
    prefix_cache_hits: int  # since the previous poll, fresh engines
    prefix_cache_queries: int  # since the previous poll, fresh engines
    generation_tokens: int  # since the previous poll, fresh engines
    kv_capacity_tokens: int | None  # summed over engines in the pool that report it
    max_model_len: int | None  # the longest among engines in the pool that report it
    restarted: frozenset[str]  # engines that restarted since the previous poll
    unready: frozenset[str]  # engines not yet up with KV capacity and max model length known
    updating: frozenset[str] = frozenset()  # decode/unified engines updating their weights

    @classmethod
    def from_samples(cls, samples: Iterable[LoadSample], at: float) -> PollSummary:
        """Reduce one poll; malformed samples raise ValueError before anything is counted."""
        every = [s for s in samples if s.reads_overload]
        _check(every)
        updating = [s for s in every if s.updating]
        readers = [s for s in every if not s.updating]
        fresh = [s for s in readers if s.health is EngineHealth.UP]
        in_pool = [s for s in readers if s.health is not EngineHealth.DOWN]
        holding = in_pool + updating  # the pool's capacity, paused or not
        capacities = [s.kv_capacity_tokens for s in holding if s.kv_capacity_tokens]
        lengths = [s.max_model_len for s in holding if s.max_model_len]
        return cls(
            at=at,
            fresh=len(fresh),
            stale=sum(1 for s in readers if s.health is EngineHealth.STALE),
            down=len(readers) - len(in_pool),
            max_kv_usage=max((s.kv_usage for s in fresh), default=0.0),
            running=sum(s.num_running for s in fresh),
            waiting=sum(s.num_waiting for s in fresh),
            waiting_capacity=sum(s.capacity_waiters for s in fresh),
            preemptions=sum(s.num_preemptions for s in fresh),
            waiting_engines=frozenset(s.engine_id for s in fresh if s.num_waiting > 0),
            prefix_cache_hits=sum(s.prefix_cache_hits for s in fresh),
            prefix_cache_queries=sum(s.prefix_cache_queries for s in fresh),
            generation_tokens=sum(s.generation_tokens for s in fresh),
            kv_capacity_tokens=sum(capacities) if capacities else None,
            max_model_len=max(lengths) if lengths else None,
            restarted=frozenset(s.engine_id for s in readers if s.restarted),
            unready=frozenset(s.engine_id for s in readers if not _ready(s)),
            updating=frozenset(s.engine_id for s in updating),
        )

    @property
    def engines(self) -> int:
        """Decode/unified engines in the pool, fresh or stale: the ones episodes' KV is spread
        over (the dispatcher balances groups across them)."""
        return self.fresh + self.stale

    @property
    def blind(self) -> bool:
        """No engine of the pool gave fresh numbers: nothing can be decided on this poll."""
        return self.fresh == 0

    @property
    def paused(self) -> bool:
        """Blind only because every engine that gave no fresh numbers is updating its
        weights: the pool stands still on purpose, which is not staleness."""
        return self.blind and bool(self.updating) and self.stale == 0

    @property
    def complete(self) -> bool:
        """Every engine of the pool gave fresh numbers: the poll may justify growth."""
        return self.fresh > 0 and self.stale == 0

    @property
    def whole(self) -> bool:
        """Complete, and every delta covers the whole interval: an engine that restarted
        reports zero deltas for it, which is not a signal but is not a measurement either;
        nor is a pool with an engine paused for an update, which generates nothing for a
        while (so the throughput probe's turnover epochs leave the pause out)."""
        return self.complete and not self.restarted and not self.updating

    @property
    def engine_requests(self) -> int:
        """Requests the fresh engines hold; reconciled against the dispatcher's permits."""
        return self.running + self.waiting

    @property
    def prefix_hit_rate(self) -> float | None:
        if self.prefix_cache_queries <= 0:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries


def _ready(sample: LoadSample) -> bool:
    """Up, and reporting what the start cap is derived from."""
    return (
        sample.health is EngineHealth.UP
        and bool(sample.kv_capacity_tokens)
        and bool(sample.max_model_len)
    )


def _check(samples: list[LoadSample]) -> None:
    seen: set[str] = set()
    for s in samples:
        if s.engine_id in seen:
            raise ValueError(f"engine {s.engine_id!r} appears twice in one poll")
        seen.add(s.engine_id)
        if not (math.isfinite(s.kv_usage) and 0.0 <= s.kv_usage <= 1.0):
            raise ValueError(f"engine {s.engine_id!r}: kv_usage {s.kv_usage} is outside 0..1")
        counts = {
            "num_running": s.num_running,
            "num_waiting": s.num_waiting,
            "num_preemptions": s.num_preemptions,
            "prefix_cache_hits": s.prefix_cache_hits,
            "prefix_cache_queries": s.prefix_cache_queries,
            "generation_tokens": s.generation_tokens,
        }
        if s.num_waiting_capacity is not None:
            counts["num_waiting_capacity"] = s.num_waiting_capacity
        for name, value in counts.items():
            if value < 0:
                raise ValueError(f"engine {s.engine_id!r}: {name} {value} is negative")
