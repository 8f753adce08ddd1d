"""The engine's state as vLLM's Prometheus families: same names, types and labels.

A custom collector in a registry of the simulator's own, read at scrape time from the
engine's counters and scheduler stats: a step costs nothing here, and several simulated
engines in one process never share a series. Every series carries vLLM's ``model_name`` and
``engine`` labels; counters and histograms carry ``_created`` samples as prometheus_client
writes them for vLLM. The families are those Pacer reads (see ``inference.metrics.names``);
``tests/sim/test_metric_names.py`` holds them equal to a recorded real exposition.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from inference.sim.engine import Engine
from inference.sim.stats import Histogram

LABELS = ("model_name", "engine")
ENGINE_INDEX = "0"  # one engine per server: data-parallel rank 0
# Label values vLLM exposes for request_success, including reasons the simulator never produces.
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
WAITING_REASONS = ("capacity", "deferred")
# vLLM 0.32 has no gauge of the served weight version (only /weight_info, and operation
# timings for its weight-transfer routes); the simulator's own family, in dev mode only.
WEIGHT_VERSION_FAMILY = "pacer_sim:weight_version_info"
PAUSED_FAMILY = "pacer_sim:paused"  # nor one of the pause state (only /is_paused)


class EngineCollector(Collector):
    """Collects one engine's metrics; ``created`` is the engine's start (Unix time)."""

    def __init__(self, engine: Engine, created: float, dev_mode: bool = False) -> None:
        self.engine = engine
        self.created = created
        self.dev_mode = dev_mode
        self.labels = [engine.config.model_name, ENGINE_INDEX]

    def collect(self) -> Iterator[Metric]:
        yield from self._queue_gauges()
        yield from self._counters()
        yield from self._histograms()
        yield self._cache_config_info()
        if self.dev_mode:
            yield from self._weight_version_info()

    def _weight_version_info(self) -> Iterator[Metric]:
        """The version label served, as an info gauge (1 on that version's series), and 1
        while paused: what a relay or controller would otherwise ask /weight_info and
        /is_paused for."""
        family = GaugeMetricFamily(
            WEIGHT_VERSION_FAMILY,
            "The weight version served, as /weight_info reports it.",
            labels=[*LABELS, "weight_version"],
        )
        family.add_metric([*self.labels, self.engine.weight_version], 1.0)
        yield family
        yield self._gauge(PAUSED_FAMILY, "1 while paused (/pause), else 0.", self.engine.is_paused)

    def _queue_gauges(self) -> Iterator[Metric]:
        stats = self.engine.make_stats()
        yield self._gauge(
            "vllm:num_requests_running", "Requests in the running batch.", stats.num_running_reqs
        )
        yield self._gauge(
            "vllm:num_requests_waiting",
            "Requests waiting to be scheduled, all reasons.",
            stats.num_waiting_reqs + stats.num_deferred_reqs,
        )
        by_reason = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason",
            "Waiting requests by reason: capacity (no KV, batch or budget room) or deferred "
            "(transient holds, here grammar compilation).",
            labels=[*LABELS, "reason"],
        )
        by_reason.add_metric([*self.labels, "capacity"], stats.num_waiting_reqs)
        by_reason.add_metric([*self.labels, "deferred"], stats.num_deferred_reqs)
        yield by_reason
        yield self._gauge(
            "vllm:kv_cache_usage_perc", "Fraction of KV blocks in use (0..1).", stats.kv_cache_usage
        )

    def _counters(self) -> Iterator[Metric]:
        counters = self.engine.counters
        for name, documentation, value in (
            ("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
             counters.prefix_cache_queries),
            ("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.",
             counters.prefix_cache_hits),
            ("vllm:num_preemptions", "Preemptions since the engine started.",
             counters.num_preemptions),
            ("vllm:prompt_tokens", "Prompt tokens of requests that started generating.",
             counters.prompt_tokens),
            ("vllm:generation_tokens", "Tokens generated.", counters.generation_tokens),
        ):  # fmt: skip
            yield self._counter(name, documentation, value)
        yield self._request_success()

    def _histograms(self) -> Iterator[Metric]:
        counters = self.engine.counters
        for name, documentation, histogram in (
            ("vllm:time_to_first_token_seconds", "Time to first token.",
             counters.time_to_first_token),
            ("vllm:e2e_request_latency_seconds", "End-to-end request latency.",
             counters.e2e_request_latency),
            ("vllm:request_queue_time_seconds", "Time from arrival to first scheduling.",
             counters.request_queue_time),
        ):  # fmt: skip
            yield self._histogram(name, documentation, histogram)

    def _gauge(self, name: str, documentation: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, documentation, labels=LABELS)
        family.add_metric(self.labels, value)
        return family

    def _counter(self, name: str, documentation: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, documentation, labels=LABELS)
        family.add_metric(self.labels, value, created=self.created)
        return family

    def _request_success(self) -> CounterMetricFamily:
        counts = {
            reason.value: count for reason, count in self.engine.counters.request_success.items()
        }
        family = CounterMetricFamily(
            "vllm:request_success",
            "Finished requests by reason.",
            labels=[*LABELS, "finished_reason"],
        )
        for reason in FINISHED_REASONS:
            family.add_metric([*self.labels, reason], counts.get(reason, 0), created=self.created)
        return family

    def _histogram(
        self, name: str, documentation: str, histogram: Histogram
    ) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, documentation, labels=LABELS)
        buckets = [(_bound_text(bound), count) for bound, count in histogram.cumulative()]
        family.add_metric(self.labels, buckets, histogram.sum)
        family.add_sample(
            f"{name}_created", dict(zip(LABELS, self.labels, strict=True)), self.created
        )
        return family

    def _cache_config_info(self) -> GaugeMetricFamily:
        info = cache_config_labels(self.engine)
        family = GaugeMetricFamily(
            "vllm:cache_config_info", "The engine's cache configuration.", labels=list(info)
        )
        family.add_metric(list(info.values()), 1.0)
        return family


def cache_config_labels(engine: Engine) -> dict[str, str]:
    """vLLM's CacheConfig fields as cache_config_info labels, with the simulator's values.

    The label set is vLLM 0.32's; fields the simulator has no notion of keep vLLM's defaults.
    ``kv_cache_size_tokens`` counts every block, the null block included, as vLLM's does.
    """
    config = engine.config
    kv_tokens = config.num_gpu_blocks * config.block_size
    return {
        "_block_size_resolved": "True",
        "block_size": str(config.block_size),
        "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(config.block_size),
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": str(config.enable_prefix_caching),
        "engine": ENGINE_INDEX,
        "gpu_memory_utilization": "0.92",
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": str(kv_tokens / config.max_model_len),
        "kv_cache_memory_bytes": "None",
        "kv_cache_size_tokens": str(kv_tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "float32",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(config.num_gpu_blocks),
        "num_gpu_blocks_override": str(config.num_gpu_blocks),
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": "True",
    }


def make_registry(engine: Engine, created: float, dev_mode: bool = False) -> CollectorRegistry:
    """A registry holding only this engine's families; ``created`` is its start (Unix time).

    ``dev_mode`` adds the simulator's weight-version family (see ``WEIGHT_VERSION_FAMILY``).
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(engine, created, dev_mode))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """Prometheus text format, as ``/metrics`` serves it."""
    return generate_latest(registry)


def _bound_text(bound: float) -> str:
    return "+Inf" if bound == float("inf") else str(float(bound))
