"""The vLLM metric names Pacer reads, current and legacy, in one place.

vLLM has renamed metrics between releases (``gpu_cache_usage_perc`` became
``kv_cache_usage_perc``, the ``gpu_`` prefix-cache counters lost their prefix) and exporters
differ on whether a counter's samples carry ``_total``. A rename that slips past a scraper
reads as an idle engine, so every spelling Pacer accepts is listed here, newest first, and the
contract tests over recorded expositions pin them.
"""

from __future__ import annotations

from enum import Enum
from types import MappingProxyType


class SeriesKind(Enum):
    """How a family's samples are read."""

    GAUGE = "gauge"  # one value per engine
    COUNTER = "counter"  # monotonic; read as deltas between scrapes
    HISTOGRAM = "histogram"  # cumulative buckets, read as bucket deltas
    INFO = "info"  # value 1; the facts are in the labels


class Series(Enum):
    """Each quantity Pacer reads from ``/metrics``."""

    RUNNING = "running"
    WAITING = "waiting"
    WAITING_BY_REASON = "waiting_by_reason"
    KV_USAGE = "kv_usage"
    PREEMPTIONS = "preemptions"
    PREFIX_CACHE_HITS = "prefix_cache_hits"
    PREFIX_CACHE_QUERIES = "prefix_cache_queries"
    PROMPT_TOKENS = "prompt_tokens"
    GENERATION_TOKENS = "generation_tokens"
    CACHE_CONFIG = "cache_config"
    TIME_TO_FIRST_TOKEN = "time_to_first_token"
    E2E_LATENCY = "e2e_latency"
    QUEUE_TIME = "queue_time"


KINDS = MappingProxyType(
    {
        Series.RUNNING: SeriesKind.GAUGE,
        Series.WAITING: SeriesKind.GAUGE,
        Series.WAITING_BY_REASON: SeriesKind.GAUGE,
        Series.KV_USAGE: SeriesKind.GAUGE,
        Series.PREEMPTIONS: SeriesKind.COUNTER,
        Series.PREFIX_CACHE_HITS: SeriesKind.COUNTER,
        Series.PREFIX_CACHE_QUERIES: SeriesKind.COUNTER,
        Series.PROMPT_TOKENS: SeriesKind.COUNTER,
        Series.GENERATION_TOKENS: SeriesKind.COUNTER,
        Series.CACHE_CONFIG: SeriesKind.INFO,
        Series.TIME_TO_FIRST_TOKEN: SeriesKind.HISTOGRAM,
        Series.E2E_LATENCY: SeriesKind.HISTOGRAM,
        Series.QUEUE_TIME: SeriesKind.HISTOGRAM,
    }
)

# Family names, newest spelling first. Counters are named without ``_total``: the parser
# accepts their samples with or without it.
NAMES = MappingProxyType(
    {
        Series.RUNNING: ("vllm:num_requests_running",),
        Series.WAITING: ("vllm:num_requests_waiting",),
        Series.WAITING_BY_REASON: ("vllm:num_requests_waiting_by_reason",),
        Series.KV_USAGE: ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        Series.PREEMPTIONS: ("vllm:num_preemptions",),
        Series.PREFIX_CACHE_HITS: ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
        Series.PREFIX_CACHE_QUERIES: (
            "vllm:prefix_cache_queries",
            "vllm:gpu_prefix_cache_queries",
        ),
        Series.PROMPT_TOKENS: ("vllm:prompt_tokens",),
        Series.GENERATION_TOKENS: ("vllm:generation_tokens",),
        Series.CACHE_CONFIG: ("vllm:cache_config_info",),
        Series.TIME_TO_FIRST_TOKEN: ("vllm:time_to_first_token_seconds",),
        Series.E2E_LATENCY: ("vllm:e2e_request_latency_seconds",),
        Series.QUEUE_TIME: ("vllm:request_queue_time_seconds",),
    }
)

# Without these an exposition is not a vLLM engine's (or not one Pacer can steer by).
REQUIRED = frozenset({Series.RUNNING, Series.WAITING, Series.KV_USAGE, Series.PREEMPTIONS})

ENGINE_LABEL = "engine"  # data-parallel rank, set by vLLM's v1 engine on every per-engine series
REASON_LABEL = "reason"  # on WAITING_BY_REASON
REASON_CAPACITY = "capacity"  # no KV or batch room: the overload signal
REASON_DEFERRED = "deferred"  # transient holds (LoRA budget, KV transfer): not overload
BUCKET_LABEL = "le"  # histogram bucket upper bound

# cache_config_info labels. The token size counts what the engine really allocated
# (``num_gpu_blocks`` has been seen to ignore ``num_gpu_blocks_override``, 4x off).
KV_TOKENS_LABEL = "kv_cache_size_tokens"
BLOCKS_OVERRIDE_LABEL = "num_gpu_blocks_override"
BLOCKS_LABEL = "num_gpu_blocks"
BLOCK_SIZE_LABEL = "block_size"


def created_names() -> dict[str, tuple[Series, int]]:
    """Map the ``_created`` sample of every counter and histogram spelling to its series.

    prometheus_client stamps each counter and histogram with the Unix time it was made (in
    the text format as a gauge family of its own, ``<name>_created``). An engine makes its
    series once, at start, so a stamp that changes between scrapes is a restart, even one whose
    new totals have already passed the old. Older exporters write no such samples.
    """
    return {
        f"{name}_created": (series, rank)
        for series, names in NAMES.items()
        if KINDS[series] in (SeriesKind.COUNTER, SeriesKind.HISTOGRAM)
        for rank, name in enumerate(names)
    }


def sample_names() -> dict[str, tuple[Series, int]]:
    """Map every accepted sample name to its series and spelling rank.

    A lower rank is a newer spelling and wins when both are exposed. Histograms are read
    through their ``_bucket`` samples only: the +Inf bucket is the count.
    """
    table: dict[str, tuple[Series, int]] = {}
    for series, names in NAMES.items():
        kind = KINDS[series]
        for rank, name in enumerate(names):
            if kind is SeriesKind.COUNTER:
                table[name + "_total"] = (series, rank)
                table[name] = (series, rank)
            elif kind is SeriesKind.HISTOGRAM:
                table[name + "_bucket"] = (series, rank)
            else:
                table[name] = (series, rank)
    return table
