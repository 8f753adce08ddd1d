"""What one scrape says about one engine, before anything is compared with earlier scrapes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from inference.metrics.histograms import Histogram
from inference.metrics.names import Series


@dataclass(frozen=True, slots=True)
class Counters:
    """Monotonic totals since the engine started; only their differences mean anything."""

    preemptions: float = 0.0
    prefix_cache_hits: float = 0.0  # tokens found in the prefix cache
    prefix_cache_queries: float = 0.0  # tokens looked up in the prefix cache
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0

    def went_backwards(self, earlier: Counters) -> bool:
        """Whether any total is below its earlier value: the engine restarted in between."""
        return any(getattr(self, f.name) < getattr(earlier, f.name) for f in fields(self))

    def minus(self, earlier: Counters) -> Counters:
        return Counters(*(getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)))


COUNTER_SERIES = MappingProxyType(
    {
        Series.PREEMPTIONS: "preemptions",
        Series.PREFIX_CACHE_HITS: "prefix_cache_hits",
        Series.PREFIX_CACHE_QUERIES: "prefix_cache_queries",
        Series.PROMPT_TOKENS: "prompt_tokens",
        Series.GENERATION_TOKENS: "generation_tokens",
    }
)


@dataclass(frozen=True, slots=True)
class EngineReading:
    """One engine's numbers from one exposition, validated but not yet differenced."""

    kv_usage: float  # 0..1
    num_running: int
    num_waiting: int
    num_waiting_capacity: int | None  # None when the engine does not report reasons
    num_waiting_deferred: int | None
    kv_capacity_tokens: int | None  # None when cache_config_info gives no usable size
    counters: Counters
    histograms: Mapping[Series, Histogram] = field(default_factory=dict)
    # Unix time each counter and histogram was made (its ``_created`` sample), for those that
    # carry one: the same for as long as the engine lives, new after every restart.
    created: Mapping[Series, float] = field(default_factory=dict)
