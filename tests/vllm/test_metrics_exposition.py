"""What a real engine's `/metrics` says, idle and under KV pressure, and that the recorded
fixtures (tests/fixtures/metrics/, recorded with inference.record_metrics) still match it."""

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inference.record_metrics import record_idle, record_pressure, sample_value
from tests.conftest import REPO_ROOT
from tests.vllm.conftest import SERVED_MODEL, EngineFactory

pytestmark = pytest.mark.vllm

FIXTURES = REPO_ROOT / "tests/fixtures/metrics"
# The families Pacer's engine monitor reads.
PACER_FAMILIES = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:generation_tokens",
    "vllm:cache_config_info",
}
# A KV cache of 16 CPU blocks of 128 tokens: a few of the load's requests fill it.
PRESSURE_BLOCKS = 16
CPU_BLOCK_TOKENS = 128
PRESSURE_MAX_MODEL_LEN = 1024


def families(exposition: str) -> dict[str, str]:
    """vLLM's metric families (name without `_total`, as the parser reports them) and types."""
    return {
        family.name: family.type
        for family in text_string_to_metric_families(exposition)
        if family.name.startswith("vllm:")
    }


def cache_config_labels(exposition: str) -> dict[str, str]:
    (info,) = (
        sample.labels
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == "vllm:cache_config_info"
    )
    return info


async def test_idle_and_pressure_expositions(engine_factory: EngineFactory) -> None:
    engine = engine_factory(
        "--num-gpu-blocks-override",
        str(PRESSURE_BLOCKS),
        "--max-model-len",
        str(PRESSURE_MAX_MODEL_LEN),
    )
    async with httpx.AsyncClient(base_url=engine.url, timeout=httpx.Timeout(30.0, read=None)) as c:
        version = (await c.get("/version")).json()["version"]
        idle = await record_idle(c, engine.url)
        pressure = await record_pressure(c, engine.url, SERVED_MODEL)

    for exposition in (idle, pressure):
        assert not PACER_FAMILIES - families(exposition).keys()
    assert sample_value(idle, "vllm:kv_cache_usage_perc") == 0
    assert sample_value(pressure, "vllm:num_requests_waiting_by_reason", reason="capacity") > 0
    assert sample_value(pressure, "vllm:prefix_cache_hits_total") > 0
    labels = cache_config_labels(pressure)
    assert labels["block_size"] == str(CPU_BLOCK_TOKENS)
    assert labels["num_gpu_blocks_override"] == str(PRESSURE_BLOCKS)
    assert labels["kv_cache_size_tokens"] == str(PRESSURE_BLOCKS * CPU_BLOCK_TOKENS)

    for kind, live in (("idle", idle), ("pressure", pressure)):
        recorded = FIXTURES / f"vllm-{version}-cpu-{kind}.txt"
        if not recorded.is_file():
            pytest.fail(f"no {recorded}: record it with python -m inference.record_metrics")
        assert families(recorded.read_text()) == families(live), f"re-record {recorded}"
