"""Contract tests (F11): recorded vLLM expositions and hand-made older-name variants parse into
the numbers they hold. Values asserted here were read off the fixture texts by eye.

vllm-0.32.0-cpu-*.txt were recorded from a real vLLM 0.32.0 CPU engine with 16 KV blocks of
128 tokens (``--num-gpu-blocks-override 16``): first idle, then under a load that preempted.
variant-*.txt are derived from the pressure text by hand; their header comments say how.
vllm-0.32.0-cpu-lora-models.json is the ``/v1/models`` body of an engine so configured serving a
LoRA adapter. vllm-0.32.0-cpu-relaunched*.* come from an engine of that configuration started
anew with ``--max-model-len 1536`` and loaded until every total Pacer reads had passed the
pressure text's: after the pressure text, a restart only the created stamps show. README.md in
the fixtures folder has the commands behind each recording.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from inference.metrics.client import MetricsClient
from inference.metrics.deltas import reading_delta
from inference.metrics.endpoints import EngineSpec
from inference.metrics.monitor import EngineMonitor
from inference.metrics.names import Series
from inference.metrics.parse import parse_exposition, parse_max_model_len
from inference.metrics.readings import COUNTER_SERIES, Counters
from inference.metrics.stats import LATENCY_SERIES, POOL
from inference.metrics.warnings import WarningKind
from tests.unit.metrics.conftest import Route, TinyServer
from workers.core.clock import ManualClock
from workers.core.samples import EngineHealth, EngineRole, LoadSample

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
IDLE = FIXTURES / "vllm-0.32.0-cpu-idle.txt"
PRESSURE = FIXTURES / "vllm-0.32.0-cpu-pressure.txt"
LEGACY = FIXTURES / "variant-legacy-names.txt"
DATA_PARALLEL = FIXTURES / "variant-data-parallel.txt"
LORA_MODELS = FIXTURES / "vllm-0.32.0-cpu-lora-models.json"
RELAUNCHED = FIXTURES / "vllm-0.32.0-cpu-relaunched.txt"
RELAUNCHED_MODELS = FIXTURES / "vllm-0.32.0-cpu-relaunched-models.json"
PRESSURE_COUNTERS = Counters(
    preemptions=3,
    prefix_cache_hits=3072,
    prefix_cache_queries=3900,
    prompt_tokens=3900,
    generation_tokens=3244,
)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.txt")), ids=lambda p: p.name)
def test_every_fixture_parses_with_a_capacity(path: Path) -> None:
    readings = parse_exposition(path.read_text(), "e")
    assert readings
    assert all(r.kv_capacity_tokens for r in readings.values())


def test_idle_engine_reads_empty_with_its_capacity() -> None:
    (reading,) = parse_exposition(IDLE.read_text(), "cpu").values()
    assert (reading.num_running, reading.num_waiting, reading.kv_usage) == (0, 0, 0.0)
    assert (reading.num_waiting_capacity, reading.num_waiting_deferred) == (0, 0)
    assert reading.kv_capacity_tokens == 16 * 128
    assert reading.counters == Counters()
    assert reading.histograms[Series.TIME_TO_FIRST_TOKEN].count == 0


def test_pressure_engine_reads_its_queue_usage_and_counters() -> None:
    readings = parse_exposition(PRESSURE.read_text(), "cpu")
    reading = readings["cpu/0"]
    assert (reading.num_running, reading.num_waiting) == (3, 13)
    assert (reading.num_waiting_capacity, reading.num_waiting_deferred) == (13, 0)
    assert reading.kv_usage == 0.9333333333333333
    assert reading.kv_capacity_tokens == 2048
    assert reading.counters == PRESSURE_COUNTERS
    assert reading.histograms[Series.TIME_TO_FIRST_TOKEN].count == 13
    assert reading.histograms[Series.E2E_LATENCY].count == 2
    assert reading.histograms[Series.QUEUE_TIME].count == 2


def test_legacy_names_read_the_same_numbers_without_a_reason_breakdown() -> None:
    (reading,) = parse_exposition(LEGACY.read_text(), "old").values()
    assert (reading.num_running, reading.num_waiting, reading.kv_usage) == (
        3,
        13,
        0.9333333333333333,
    )
    assert reading.num_waiting_capacity is None
    assert reading.counters == PRESSURE_COUNTERS
    # No token size: the override's 16 blocks x 128, not num_gpu_blocks' 64 x 128.
    assert reading.kv_capacity_tokens == 2048


def test_data_parallel_ranks_read_apart() -> None:
    readings = parse_exposition(DATA_PARALLEL.read_text(), "dp")
    assert sorted(readings) == ["dp/0", "dp/1"]
    rank0, rank1 = readings["dp/0"], readings["dp/1"]
    assert (rank0.num_running, rank0.num_waiting_capacity, rank0.kv_usage) == (
        3,
        13,
        0.9333333333333333,
    )
    assert (rank1.num_running, rank1.num_waiting_capacity, rank1.kv_usage) == (5, 0, 0.4)
    assert rank0.counters == PRESSURE_COUNTERS
    assert rank1.counters == Counters(0, 100, 400, 3900, 1000)


def test_a_data_parallel_rank_keeps_its_id_and_numbers_when_the_other_vanishes() -> None:
    text = DATA_PARALLEL.read_text()
    rank0_only = "\n".join(line for line in text.splitlines() if 'engine="1"' not in line)
    readings = parse_exposition(rank0_only, "dp")
    assert list(readings) == ["dp/0"]
    assert readings["dp/0"] == parse_exposition(text, "dp")["dp/0"]


async def test_monitor_over_http_turns_idle_then_pressure_into_one_sample(
    tiny_server: TinyServer,
) -> None:
    """The recorded pair is one engine's history: idle, then loaded. Read it as two polls."""
    models = {"data": [{"id": "pacer-tiny", "max_model_len": 1024}]}
    tiny_server.routes["/v1/models"] = Route(body=json.dumps(models).encode())
    tiny_server.routes["/metrics"] = Route(body=IDLE.read_bytes())
    clock = ManualClock()
    spec = EngineSpec("cpu-0", tiny_server.url, EngineRole.DECODE)
    async with MetricsClient(httpx.AsyncClient()) as client:
        monitor = EngineMonitor([spec], client, clock)
        await monitor.poll()
        tiny_server.routes["/metrics"] = Route(body=PRESSURE.read_bytes())
        clock.advance(5.0)
        result = await monitor.poll()
    assert result.samples == (
        LoadSample(
            engine_id="cpu-0/0",
            role=EngineRole.DECODE,
            scraped_at=5.0,
            health=EngineHealth.UP,
            kv_capacity_tokens=2048,
            max_model_len=1024,
            kv_usage=0.9333333333333333,
            num_running=3,
            num_waiting=13,
            num_waiting_capacity=13,
            num_preemptions=3,
            prefix_cache_hits=3072,
            prefix_cache_queries=3900,
            generation_tokens=3244,
        ),
    )
    stats = {s.scope: s for s in result.stats}
    assert stats[POOL].prefix_cache_hit_rate == pytest.approx(3072 / 3900)
    assert stats["cpu-0/0"].generation_tokens_per_s == pytest.approx(3244 / 5.0)
    ttft = stats["cpu-0/0"].latency[Series.TIME_TO_FIRST_TOKEN]
    # 11 first tokens within (0.04, 0.06] s and 2 within (0.06, 0.08] s.
    assert (ttft.count, ttft.p50, ttft.p90) == (
        13,
        pytest.approx(0.04 + 0.02 * 6.5 / 11),
        pytest.approx(0.067),
    )
    e2e = stats["cpu-0/0"].latency[Series.E2E_LATENCY]
    assert (e2e.count, e2e.p50) == (2, pytest.approx(1.75))  # both within (1.5, 2.0] s


def test_a_recorded_lora_models_list_reads_the_base_models_length() -> None:
    """vLLM 0.32 lists the adapter after its base model, with a null length of its own."""
    entries = json.loads(LORA_MODELS.read_bytes())["data"]
    assert [(e["id"], e["parent"], e["max_model_len"]) for e in entries] == [
        ("pacer-tiny", None, 1024),
        ("pacer-tiny-lora", "pacer-tiny", None),
    ]
    assert parse_max_model_len(LORA_MODELS.read_bytes()) == 1024


async def test_lora_adapters_with_null_max_model_len_are_ignored_by_the_monitor(
    tiny_server: TinyServer,
) -> None:
    """The engine is ready (length known) on its first poll, and /v1/models is read once."""
    tiny_server.routes["/v1/models"] = Route(body=LORA_MODELS.read_bytes())
    tiny_server.routes["/metrics"] = Route(body=IDLE.read_bytes())
    clock = ManualClock()
    spec = EngineSpec("cpu-0", tiny_server.url, EngineRole.DECODE)
    async with MetricsClient(httpx.AsyncClient()) as client:
        monitor = EngineMonitor([spec], client, clock)
        results = []
        for _ in range(3):
            results.append(await monitor.poll())
            clock.advance(5.0)
    assert [r.samples[0].max_model_len for r in results] == [1024, 1024, 1024]
    assert [r.endpoints[0].models_error for r in results] == [None, None, None]
    assert tiny_server.requests.count("/v1/models") == 1


def test_created_stamps_are_read_from_real_vllm_text() -> None:
    """Each counter and histogram Pacer reads carries its own stamp, fixed for the engine's
    life: the idle and pressure texts share them, the relaunched engine's are all new."""
    idle, pressure, relaunched = (
        parse_exposition(path.read_text(), "cpu")["cpu/0"] for path in (IDLE, PRESSURE, RELAUNCHED)
    )
    assert pressure.created[Series.GENERATION_TOKENS] == 1.796018521705754e09
    assert pressure.created[Series.PREEMPTIONS] == 1.796018521705328e09
    assert pressure.created[Series.TIME_TO_FIRST_TOKEN] == 1.7960185217065287e09
    assert relaunched.created[Series.GENERATION_TOKENS] == 1.7961176053610592e09
    assert set(pressure.created) == set(COUNTER_SERIES) | set(LATENCY_SERIES)
    assert idle.created == pressure.created
    assert all(relaunched.created[s] != pressure.created[s] for s in pressure.created)
    (legacy,) = parse_exposition(LEGACY.read_text(), "old").values()
    assert set(legacy.created) == set(LATENCY_SERIES)  # the variant drops counters' stamps


def test_a_relaunched_engine_whose_totals_passed_the_old_ones_reads_as_a_restart() -> None:
    """What the counters alone miss: every total is higher, yet this is another engine."""
    pressure = parse_exposition(PRESSURE.read_text(), "cpu")["cpu/0"]
    relaunched = parse_exposition(RELAUNCHED.read_text(), "cpu")["cpu/0"]
    assert not relaunched.counters.went_backwards(pressure.counters)
    assert relaunched.counters == Counters(18, 3328, 4200, 4200, 5925)
    delta = reading_delta(pressure, relaunched, 5.0, 30.0)
    assert (delta.restarted, delta.counters, delta.histograms) == (True, Counters(), {})


async def test_monitor_over_http_sees_a_real_relaunch_and_rereads_max_model_len_at_once(
    tiny_server: TinyServer,
) -> None:
    """The pressure text's engine as if killed and started again with another --max-model-len
    between two polls: the recordings are what a scraper would read."""
    tiny_server.routes["/v1/models"] = Route(body=LORA_MODELS.read_bytes())
    tiny_server.routes["/metrics"] = Route(body=PRESSURE.read_bytes())
    clock = ManualClock()
    spec = EngineSpec("cpu-0", tiny_server.url, EngineRole.DECODE)
    async with MetricsClient(httpx.AsyncClient()) as client:
        monitor = EngineMonitor([spec], client, clock)
        before = await monitor.poll()
        tiny_server.routes["/metrics"] = Route(body=RELAUNCHED.read_bytes())
        tiny_server.routes["/v1/models"] = Route(body=RELAUNCHED_MODELS.read_bytes())
        clock.advance(5.0)
        restart = await monitor.poll()
        clock.advance(5.0)
        after = await monitor.poll()
    assert before.samples[0].max_model_len == 1024
    (sample,) = restart.samples
    assert (sample.restarted, sample.max_model_len) == (True, 1536)
    assert (sample.num_preemptions, sample.generation_tokens, sample.prefix_cache_hits) == (0, 0, 0)
    assert (sample.num_running, sample.num_waiting_capacity, sample.kv_usage) == (5, 11, 1.0)
    assert [(w.kind, w.engine_id) for w in restart.warnings] == [
        (WarningKind.ENGINE_RESTART, "cpu-0/0")
    ]
    assert {s.scope: s.generation_tokens_per_s for s in restart.stats} == {
        "cpu-0/0": None,
        POOL: None,
    }
    assert (after.samples[0].restarted, after.samples[0].max_model_len) == (False, 1536)
    assert after.warnings == ()
    assert tiny_server.requests.count("/v1/models") == 2
