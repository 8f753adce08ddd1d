"""/metrics from the engine's state: vLLM's families, labels and the engine's numbers."""

from __future__ import annotations

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from inference.sim.engine import Engine
from inference.sim.metrics import exposition, make_registry
from inference.sim.sampling import SamplingParams
from tests.unit.sim.helpers import make_engine

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(engine: Engine) -> Samples:
    text = exposition(make_registry(engine, created=1.0)).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_gauges_and_counters_follow_the_engine() -> None:
    engine = make_engine(max_num_seqs=1, model_name="m")
    engine.add_request("a", np.arange(10), SamplingParams(max_tokens=3), 0.0)
    engine.add_request("b", np.arange(20, 30), SamplingParams(max_tokens=3), 0.0)
    engine.step(0.0)
    values = samples(engine)
    labels = (("engine", "0"), ("model_name", "m"))
    assert values[("vllm:num_requests_running", labels)] == 1
    assert values[("vllm:num_requests_waiting", labels)] == 1
    assert values[("vllm:num_requests_waiting_by_reason", (*labels, ("reason", "capacity")))] == 1
    assert values[("vllm:num_requests_waiting_by_reason", (*labels, ("reason", "deferred")))] == 0
    assert values[("vllm:kv_cache_usage_perc", labels)] == 3 / 16
    assert values[("vllm:prompt_tokens_total", labels)] == 10
    assert values[("vllm:generation_tokens_total", labels)] == 1
    assert values[("vllm:prefix_cache_queries_total", labels)] == 10
    assert values[("vllm:num_preemptions_created", labels)] == 1.0
    assert values[("vllm:time_to_first_token_seconds_count", labels)] == 1


def test_histograms_and_request_success_carry_vllm_labels() -> None:
    engine = make_engine()
    engine.add_request("a", np.arange(4), SamplingParams(max_tokens=1), 0.0)
    engine.step(0.0)
    values = samples(engine)
    labels = (("engine", "0"), ("model_name", "sim-model"))
    reasons = {
        dict(key[1])["finished_reason"]: value
        for key, value in values.items()
        if key[0] == "vllm:request_success_total"
    }
    assert reasons == {"stop": 0, "length": 1, "abort": 0, "error": 0, "repetition": 0}
    bucket = ("vllm:e2e_request_latency_seconds_bucket", (*labels[:1], ("le", "0.3"), labels[1]))
    assert values[bucket] == 1
    assert values[("vllm:request_queue_time_seconds_sum", labels)] == 0.0


def test_cache_config_info_reports_blocks_and_kv_tokens() -> None:
    engine = make_engine(num_gpu_blocks=33, block_size=4)
    info = next(dict(key[1]) for key in samples(engine) if key[0] == "vllm:cache_config_info")
    assert (info["num_gpu_blocks"], info["block_size"], info["kv_cache_size_tokens"]) == (
        "33",
        "4",
        "132",
    )
