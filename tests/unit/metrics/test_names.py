"""The table of accepted sample names."""

from __future__ import annotations

from inference.metrics.names import KINDS, NAMES, Series, SeriesKind, created_names, sample_names


def test_every_series_has_a_kind_and_a_name() -> None:
    assert set(KINDS) == set(NAMES) == set(Series)
    assert all(NAMES[series] for series in Series)


def test_counters_are_accepted_with_and_without_total() -> None:
    table = sample_names()
    assert table["vllm:num_preemptions_total"] == (Series.PREEMPTIONS, 0)
    assert table["vllm:num_preemptions"] == (Series.PREEMPTIONS, 0)


def test_legacy_spellings_rank_after_current_ones() -> None:
    table = sample_names()
    assert table["vllm:kv_cache_usage_perc"][1] < table["vllm:gpu_cache_usage_perc"][1]
    assert table["vllm:gpu_prefix_cache_hits_total"] == (Series.PREFIX_CACHE_HITS, 1)


def test_histograms_are_read_through_their_buckets_only() -> None:
    table = sample_names()
    name = NAMES[Series.E2E_LATENCY][0]
    assert KINDS[Series.E2E_LATENCY] is SeriesKind.HISTOGRAM
    assert table[f"{name}_bucket"] == (Series.E2E_LATENCY, 0)
    assert f"{name}_count" not in table
    assert name not in table


def test_counters_and_histograms_are_stamped_under_their_family_name_with_created() -> None:
    table = created_names()
    assert table["vllm:num_preemptions_created"] == (Series.PREEMPTIONS, 0)
    assert table["vllm:gpu_prefix_cache_hits_created"] == (Series.PREFIX_CACHE_HITS, 1)
    assert table["vllm:time_to_first_token_seconds_created"] == (Series.TIME_TO_FIRST_TOKEN, 0)
    assert "vllm:kv_cache_usage_perc_created" not in table
    assert not set(table) & set(sample_names())
