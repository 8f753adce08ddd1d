"""``bench fit``: a recorded run's measured lengths and engines become a workload file that
``bench run`` reads, built from plain records (no database here)."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from bench.virtual.fit import EngineSeen, RecordedRun, StepTotals, fit_workload, workload_toml
from bench.virtual.run import run_workload
from bench.virtual.workload import parse_workload
from workers.core.config.fields import ConfigError

CONFIG: dict[str, Any] = {
    "name": "agentic",
    "batch_size": 16,
    "group_size": 4,
    "seed": 7,
    "concurrency": {"policy": "pacer", "poll_interval_s": 2.0},
    "env": [
        {
            "name": "multiturn",
            "args": {
                "turns": 4,
                "prompt_tokens": 128,
                "completion_tokens": {"kind": "lognormal", "mean": 100, "sigma": 0.5, "max": 400},
                "latency_s": {"kind": "lognormal", "mean": 2.0, "sigma": 0.5},
            },
        }
    ],
    "engine": [{"url": "http://a:8000", "max_num_seqs": 128}, {"url": "http://b:8000"}],
}


def recorded(config: dict[str, Any] = CONFIG, **fields: Any) -> RecordedRun:
    engines = [
        EngineSeen("http://a:8000", "unified", 16384, 2048, 128),
        EngineSeen("http://b:8000", "unified", 16384, 2048, 128),
    ]
    base: dict[str, Any] = {
        "run_id": 12,
        "name": "agentic",
        "config": config,
        "elapsed_s": 300.0,
        # 32 episodes of 1,200 generated tokens: 300 a turn over 4 turns
        "steps": [StepTotals(16, 19_200), StepTotals(16, 19_200)],
        "engines": engines,
    }
    return RecordedRun(**{**base, **fields})


def test_measured_lengths_replace_the_configs_and_keep_its_shape() -> None:
    document = fit_workload(recorded())
    args = document["env"][0]["args"]
    assert args["completion_tokens"] == {
        "kind": "lognormal",
        "mean": 300.0,
        "sigma": 0.5,
        "max": 1200.0,
    }
    assert args["turns"] == 4 and args["latency_s"] == CONFIG["env"][0]["args"]["latency_s"]
    assert CONFIG["env"][0]["args"]["completion_tokens"]["mean"] == 100  # not changed in place


def test_engines_run_size_and_duration_come_from_the_records() -> None:
    document = fit_workload(recorded())
    assert document["engine"] == [
        {
            "count": 2,
            "role": "unified",
            "kv_tokens": 16384,
            "max_model_len": 2048,
            "max_num_seqs": 128,
        }
    ]
    assert document["run"] == {
        "seconds": 300.0,
        "poll_interval_s": 2.0,
        "batch_size": 16,
        "group_size": 4,
        "seed": 7,
    }
    assert "128.0 completed-episode tokens/s" in document["workload"]["description"]


def test_engines_of_different_shapes_get_a_table_each() -> None:
    engines = [
        EngineSeen("p", "prefill", 8192, 1024, None),
        EngineSeen("d1", "decode", 16384, 1024, None),
        EngineSeen("d2", "decode", 16384, 1024, None),
    ]
    tables = fit_workload(recorded(engines=engines))["engine"]
    assert [(t["role"], t["count"]) for t in tables] == [("decode", 2), ("prefill", 1)]
    assert all("max_num_seqs" not in t for t in tables)


def test_where_the_model_ends_its_answer_the_engines_answer_at_the_measured_mean() -> None:
    config = {**CONFIG, "env": [{"name": "arithmetic", "weight": 1.0}]}
    document = fit_workload(recorded(config))
    assert document["env"] == [{"name": "arithmetic", "weight": 1.0}]
    assert document["engine"][0]["answer_length"] == "lognormal:1200.0:0.5"


def test_mixed_environments_spread_the_measured_tokens_over_their_weighted_turns() -> None:
    env = [
        {"name": "multiturn", "weight": 1.0, "args": {"turns": 5, "completion_tokens": 10}},
        {
            "name": "longtail",
            "weight": 3.0,
            "args": {"completion_tokens": {"kind": "uniform", "low": 50, "high": 150}},
        },
    ]
    document = fit_workload(recorded({**CONFIG, "env": env}))
    # mean turns (5 + 3 * 1) / 4 = 2: 600 tokens a turn
    assert document["env"][0]["args"]["completion_tokens"] == 600.0
    assert document["env"][1]["args"]["completion_tokens"]["low"] == 300.0
    assert document["env"][1]["args"]["completion_tokens"]["high"] == 900.0


def test_the_toml_reads_back_as_a_workload_and_runs() -> None:
    document = fit_workload(recorded(elapsed_s=30.0))
    text = workload_toml(document)
    assert tomllib.loads(text) == document
    outcome = run_workload(parse_workload(tomllib.loads(text)), "fixed:16")
    assert outcome.throughput > 0 and outcome.completed_episodes > 0


def test_strings_that_toml_escapes_differently_survive() -> None:
    document = {"workload": {"name": 'a "b"\\ é \x7f \U0001f600\n', "odd key": 1}}
    assert tomllib.loads(workload_toml(document)) == document


def test_a_run_with_nothing_to_measure_says_what_is_missing() -> None:
    with pytest.raises(ConfigError) as refused:
        fit_workload(recorded({"name": "x"}, steps=[], engines=[], elapsed_s=0.0))
    assert [e.path for e in refused.value.errors] == ["steps", "samples", "config.env", "elapsed"]
