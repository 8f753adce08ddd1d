"""Exposition text to per-engine readings, on small hand-written texts (fixtures: test_contract)."""

from __future__ import annotations

import contextlib
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference.metrics.errors import ScrapeBadFormat
from inference.metrics.names import Series
from inference.metrics.parse import parse_exposition, parse_max_model_len
from tests.unit.metrics.texts import LABELS, exposition


def test_reads_the_gauges_and_counters_of_one_engine_under_its_rank_id() -> None:
    readings = parse_exposition(exposition(), "e0")
    assert list(readings) == ["e0/0"]
    reading = readings["e0/0"]
    assert (reading.num_running, reading.num_waiting, reading.kv_usage) == (7, 3, 0.25)
    assert reading.counters.preemptions == 2.0
    assert reading.counters.generation_tokens == 900.0
    assert reading.counters.prefix_cache_hits == 0.0  # absent counters read 0 and never move


def test_counters_without_total_read_the_same_typed_or_untyped() -> None:
    typed = exposition().replace("vllm:num_preemptions_total", "vllm:num_preemptions")
    untyped = "\n".join(
        line for line in typed.splitlines() if not line.startswith("# TYPE vllm:num_preemptions")
    )
    assert parse_exposition(typed, "e")["e/0"].counters.preemptions == 2.0
    assert parse_exposition(untyped, "e")["e/0"].counters.preemptions == 2.0


def test_legacy_gpu_cache_usage_is_read_when_the_new_name_is_absent() -> None:
    legacy = exposition().replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    assert parse_exposition(legacy, "e")["e/0"].kv_usage == 0.25


def test_new_name_wins_when_both_spellings_are_exposed() -> None:
    both = exposition(
        extra=f"# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{{{LABELS}}} 0.9\n"
    )
    assert parse_exposition(both, "e")["e/0"].kv_usage == 0.25


def test_legacy_prefix_cache_counters_are_read() -> None:
    extra = (
        f"vllm:gpu_prefix_cache_hits_total{{{LABELS}}} 40.0\n"
        f"vllm:gpu_prefix_cache_queries_total{{{LABELS}}} 100.0\n"
    )
    counters = parse_exposition(exposition(extra=extra), "e")["e/0"].counters
    assert (counters.prefix_cache_hits, counters.prefix_cache_queries) == (40.0, 100.0)


def test_waiting_by_reason_splits_capacity_from_deferred() -> None:
    extra = (
        "# TYPE vllm:num_requests_waiting_by_reason gauge\n"
        f'vllm:num_requests_waiting_by_reason{{{LABELS},reason="capacity"}} 2.0\n'
        f'vllm:num_requests_waiting_by_reason{{{LABELS},reason="deferred"}} 1.0\n'
    )
    reading = parse_exposition(exposition(extra=extra), "e")["e/0"]
    assert (reading.num_waiting_capacity, reading.num_waiting_deferred) == (2, 1)


def test_waiting_by_reason_absent_reads_none_not_zero() -> None:
    reading = parse_exposition(exposition(), "e")["e/0"]
    assert reading.num_waiting_capacity is None
    assert reading.num_waiting_deferred is None


def cache_config(**labels: str) -> str:
    pairs = ",".join(f'{k}="{v}"' for k, v in {"engine": "0", **labels}.items())
    return f"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{{pairs}}} 1.0\n"


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"kv_cache_size_tokens": "4096", "num_gpu_blocks": "1000", "block_size": "16"}, 4096),
        ({"num_gpu_blocks_override": "64", "num_gpu_blocks": "256", "block_size": "16"}, 1024),
        ({"num_gpu_blocks_override": "None", "num_gpu_blocks": "256", "block_size": "16"}, 4096),
        ({"kv_cache_size_tokens": "None", "num_gpu_blocks": "None", "block_size": "16"}, None),
        ({"num_gpu_blocks": "256"}, None),
    ],
)
def test_capacity_prefers_the_token_size_then_the_override_then_blocks(
    labels: dict[str, str], expected: int | None
) -> None:
    reading = parse_exposition(exposition(extra=cache_config(**labels)), "e")["e/0"]
    assert reading.kv_capacity_tokens == expected


@pytest.mark.parametrize("size", ["²", "٣", "-1", "4k"])
def test_a_size_label_other_than_ascii_digits_is_an_unknown_size(size: str) -> None:
    """Superscript "²" passes str.isdigit() but fails int(); "٣" passes both and reads as 3.
    Either way the engine's sample survives and the next size label is read instead."""
    labels = {"kv_cache_size_tokens": size, "num_gpu_blocks": "256", "block_size": "16"}
    reading = parse_exposition(exposition(extra=cache_config(**labels)), "e")["e/0"]
    assert (reading.kv_capacity_tokens, reading.num_running) == (4096, 7)


def test_capacity_is_none_without_cache_config() -> None:
    assert parse_exposition(exposition(), "e")["e/0"].kv_capacity_tokens is None


def test_data_parallel_ranks_get_their_own_ids_and_share_unlabelled_series() -> None:
    rank0 = exposition('engine="0",model_name="m"')
    rank1 = exposition('engine="1",model_name="m"', usage=0.75)
    shared = cache_config(kv_cache_size_tokens="2048").replace('engine="0",', "")
    readings = parse_exposition(rank0 + rank1 + shared, "dp")
    assert sorted(readings) == ["dp/0", "dp/1"]
    assert readings["dp/1"].kv_usage == 0.75
    assert readings["dp/0"].kv_usage == 0.25
    assert readings["dp/0"].kv_capacity_tokens == readings["dp/1"].kv_capacity_tokens == 2048


def test_a_labelled_engine_keeps_its_rank_in_its_id_even_when_alone() -> None:
    """An id must not hang on how many ranks one scrape shows, or a rank is renamed when its
    sibling vanishes and its counter deltas restart from nothing."""
    rank0 = exposition('engine="0",model_name="m"', running=2)
    rank1 = exposition('engine="1",model_name="m"', running=6)
    assert sorted(parse_exposition(rank0 + rank1, "dp")) == ["dp/0", "dp/1"]
    assert {k: r.num_running for k, r in parse_exposition(rank0, "dp").items()} == {"dp/0": 2}
    assert {k: r.num_running for k, r in parse_exposition(rank1, "dp").items()} == {"dp/1": 6}


def test_series_without_any_engine_label_belong_to_the_endpoint() -> None:
    readings = parse_exposition(exposition('model_name="m"'), "plain")
    assert list(readings) == ["plain"]
    assert readings["plain"].num_running == 7


def test_labelled_values_win_over_unlabelled_ones_of_the_same_series() -> None:
    text = (
        exposition()
        + '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 99\n'
    )
    assert parse_exposition(text, "e")["e/0"].num_running == 7


def test_created_stamps_are_read_per_series_and_rank_in_either_counter_spelling() -> None:
    """``_created`` follows the family name, with or without ``_total`` on the counter; a
    rank's stamp is its earliest row's, so a row first used later does not move it."""
    rank0 = exposition(
        extra=f"vllm:generation_tokens_created{{{LABELS}}} 1700000000.5\n"
        f"vllm:num_preemptions_created{{{LABELS}}} 1700000000.25\n"
        f"vllm:e2e_request_latency_seconds_created{{{LABELS}}} 1700000000.75\n"
    )
    legacy_rank1 = exposition('engine="1",model_name="m"').replace(
        "vllm:num_preemptions_total", "vllm:num_preemptions"
    ) + (
        'vllm:num_preemptions_created{engine="1",model_name="m"} 1700000900.0\n'
        'vllm:num_preemptions_created{engine="1",model_name="lora"} 1700000950.0\n'
    )
    readings = parse_exposition(rank0 + legacy_rank1, "dp")
    assert readings["dp/0"].created == {
        Series.GENERATION_TOKENS: 1700000000.5,
        Series.PREEMPTIONS: 1700000000.25,
        Series.E2E_LATENCY: 1700000000.75,
    }
    assert readings["dp/1"].created == {Series.PREEMPTIONS: 1700000900.0}
    assert readings["dp/1"].counters.preemptions == 2.0


def test_a_non_finite_created_stamp_is_a_clear_error() -> None:
    extra = f"vllm:generation_tokens_created{{{LABELS}}} NaN\n"
    with pytest.raises(ScrapeBadFormat, match=r"vllm:generation_tokens_created.* is nan"):
        parse_exposition(exposition(extra=extra), "e")


def test_histogram_buckets_are_read_cumulatively_in_bound_order() -> None:
    extra = (
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        f'vllm:time_to_first_token_seconds_bucket{{{LABELS},le="0.1"}} 2.0\n'
        f'vllm:time_to_first_token_seconds_bucket{{{LABELS},le="1.0"}} 5.0\n'
        f'vllm:time_to_first_token_seconds_bucket{{{LABELS},le="+Inf"}} 6.0\n'
        f"vllm:time_to_first_token_seconds_count{{{LABELS}}} 6.0\n"
        f"vllm:time_to_first_token_seconds_sum{{{LABELS}}} 3.5\n"
    )
    hist = parse_exposition(exposition(extra=extra), "e")["e/0"].histograms[
        Series.TIME_TO_FIRST_TOKEN
    ]
    assert hist.bounds == (0.1, 1.0, float("inf"))
    assert hist.cumulative == (2.0, 5.0, 6.0)
    assert hist.count == 6.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty body"),
        ("   \n\n", "empty body"),
        ("<html><body><h1>502 Bad Gateway</h1></body></html>", "an HTML page"),
        ('vllm:num_requests_running{engine="0" 7.0', "not Prometheus text"),
        ("# TYPE up gauge\nup 1\n", "missing kv_usage, preemptions, running, waiting"),
        (exposition(usage="NaN"), "is nan, not finite"),
        (exposition(usage="+Inf"), "is inf, not finite"),
        (exposition(usage=1.5), "outside 0..1"),
        (exposition(running=-1), "not a whole non-negative count"),
        (exposition().replace("7.0", "6.5"), "not a whole non-negative count"),
        (exposition(generated=-5), "negative"),
    ],
)
def test_bad_input_gets_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ScrapeBadFormat, match=message):
        parse_exposition(text, "e")


def test_a_histogram_without_an_inf_bucket_is_rejected() -> None:
    extra = f'vllm:e2e_request_latency_seconds_bucket{{{LABELS},le="1.0"}} 2.0\n'
    with pytest.raises(ScrapeBadFormat, match="e2e_latency is not a valid histogram"):
        parse_exposition(exposition(extra=extra), "e")


def test_non_finite_values_of_series_pacer_does_not_read_are_ignored() -> None:
    extra = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total NaN\n"
    assert parse_exposition(exposition(extra=extra), "e")["e/0"].num_running == 7


@given(st.text(max_size=200))
def test_arbitrary_text_raises_bad_format_and_nothing_else(text: str) -> None:
    """Random text almost never parses; what matters is that no other exception escapes."""
    with contextlib.suppress(ScrapeBadFormat):
        parse_exposition(text, "e")


@given(
    usage=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["", "x"])),
    running=st.integers(min_value=-5, max_value=10**6),
    dropped=st.sets(st.integers(min_value=0, max_value=12)),
)
def test_a_damaged_real_exposition_parses_into_sane_numbers_or_raises_bad_format(
    usage: float | str, running: int, dropped: set[int]
) -> None:
    """Near-valid texts: odd values, lines missing. Whatever parses must be usable as is."""
    lines = exposition(usage=usage, running=running).splitlines()
    text = "\n".join(line for i, line in enumerate(lines) if i not in dropped) + "\n"
    try:
        readings = parse_exposition(text, "e")
    except ScrapeBadFormat:
        return
    for reading in readings.values():
        assert 0.0 <= reading.kv_usage <= 1.0
        assert reading.num_running >= 0 and reading.num_waiting >= 0


def test_max_model_len_is_the_smallest_listed() -> None:
    body = json.dumps(
        {
            "object": "list",
            "data": [{"id": "m", "max_model_len": 4096}, {"id": "lora", "max_model_len": 2048}],
        }
    ).encode()
    assert parse_max_model_len(body) == 2048


def test_lora_adapters_with_null_max_model_len_are_ignored() -> None:
    """vLLM lists each adapter with a null length: it runs on the base model's (hand-written
    here; the recorded body is read in test_contract)."""
    body = json.dumps(
        {
            "object": "list",
            "data": [
                {"id": "base", "parent": None, "max_model_len": 8192},
                {"id": "sql-lora", "parent": "base", "max_model_len": None},
            ],
        }
    ).encode()
    assert parse_max_model_len(body) == 8192


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"<html></html>",
        b'{"data": []}',
        b'{"data": [{"id": "m"}]}',
        b'{"data": [{"max_model_len": "4k"}]}',
        b'{"data": [{"id": "lora", "max_model_len": null}]}',
        b'{"data": [{"max_model_len": 8192}, {"max_model_len": 0}, {"max_model_len": null}]}',
    ],
)
def test_a_bad_models_list_gets_a_clear_error(body: bytes) -> None:
    with pytest.raises(ScrapeBadFormat, match="/v1/models"):
        parse_max_model_len(body)


def test_a_malformed_line_of_a_family_pacer_does_not_read_costs_nothing() -> None:
    extra = 'vllm:request_params_n_bucket{le="1.0" oops\n'
    assert parse_exposition(exposition(extra=extra), "e")["e/0"].num_running == 7


@pytest.mark.parametrize("gap", [" ", "\t"])
def test_a_name_garbled_by_whitespace_is_a_clear_error(gap: str) -> None:
    """The line filter reads the name up to the gap, the parser up to the brace."""
    name = f"vllm:num_preemptions{gap}_total"
    extra = f'{name}{{engine="0"}} 3\n'
    with pytest.raises(ScrapeBadFormat, match=re.escape(f"garbled sample name {name!r}")):
        parse_exposition(exposition(extra=extra), "e")


def test_a_malformed_line_of_a_family_pacer_reads_is_an_error() -> None:
    extra = 'vllm:num_requests_waiting_by_reason{reason="capacity" 3\n'
    with pytest.raises(ScrapeBadFormat, match="not Prometheus text"):
        parse_exposition(exposition(extra=extra), "e")


def test_capacity_follows_a_changed_cache_config_line() -> None:
    """The info line's parse is memoized by its text: new text, new numbers."""
    small = exposition(extra=cache_config(kv_cache_size_tokens="4096"))
    large = exposition(extra=cache_config(kv_cache_size_tokens="8192"))
    capacities = [parse_exposition(t, "e")["e/0"].kv_capacity_tokens for t in (small, large, small)]
    assert capacities == [4096, 8192, 4096]
