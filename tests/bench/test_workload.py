"""Workload files: the shipped ones read, and a bad one names every field it gets wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.virtual.suite import shipped_workloads
from bench.virtual.workload import load_workload, parse_workload
from workers.core.config.fields import ConfigError
from workers.core.samples import EngineRole

GOOD: dict[str, object] = {
    "workload": {"name": "t"},
    "run": {"seconds": 60, "batch_size": 8, "group_size": 4},
    "engine": [{"count": 2, "kv_tokens": 8192, "max_model_len": 1024}],
    "env": [{"name": "longtail", "args": {"completion_tokens": 100}}],
}


def test_every_shipped_workload_reads() -> None:
    names = [load_workload(path).name for path in shipped_workloads()]
    assert names == ["W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8", "W9", "W10", "W11"]


def test_a_workload_becomes_engines_and_a_run_config() -> None:
    workload = parse_workload(GOOD)
    assert [e.name for e in workload.engines] == ["unified-0-0", "unified-0-1"]
    assert workload.engines[0].kv_tokens == 8192
    config = workload.run_config({"policy": "reference"})
    assert (config.batch_size, config.group_size) == (8, 4)
    assert config.concurrency.policy == "reference"


def test_disaggregated_engines_keep_their_roles_and_prefill_serves_nothing() -> None:
    path = Path(__file__).resolve().parents[2] / "bench" / "workloads" / "w7_disaggregated.toml"
    workload = load_workload(path)
    roles = [e.role for e in workload.engines]
    assert roles == [EngineRole.PREFILL, EngineRole.DECODE, EngineRole.DECODE]
    assert all(e.role is EngineRole.DECODE for e in workload.serving)


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        ({"engine": [{"kv_tokens": -5}]}, "engine[0].kv_tokens", "must be >= 1"),
        ({"engine": [{"preset": "tpu"}]}, "engine[0].preset", "must be one of"),
        ({"engine": [{"answer_length": "gauss:3"}]}, "engine[0].answer_length", "bad length"),
        ({"engine": [{"role": "prefill"}]}, "engine", "unified or decode"),
        ({"engine": [{"colour": 1}]}, "engine[0].colour", "unknown key"),
        ({"run": {"batch_size": 6, "group_size": 4}}, "run.batch_size", "multiple of"),
        ({"run": {"seconds": 0}}, "run.seconds", "must be >= 1"),
        ({"env": [{"name": "multiturn", "args": {"turns": 0}}]}, "env[0].args.turns", ">= 1"),
        ({"env": [{"name": "nope"}]}, "env[0].name", "unknown environment"),
        ({"event": [{"at_s": 5, "kind": "meteor"}]}, "event[0].kind", "must be one of"),
        ({"event": [{"at_s": 5, "kind": "engine_down", "engine": 7}]}, "event[0].engine", "0..1"),
        ({"event": [{"at_s": 999, "kind": "lengths"}]}, "event[0].at_s", "must be <= 60"),
        ({"event": [{"at_s": 5, "kind": "eval_wave"}]}, "event[0].kind", "needs an [[env]]"),
        ({"workload": {}}, "workload.name", "is required"),
        ({"trainer": {"updates": "all", "train_s": 5}}, "trainer.updates", "must be one of"),
        ({"trainer": {"updates": "sync"}}, "trainer.train_s", "is required"),
        ({"engine": [{"reload_s": -1}]}, "engine[0].reload_s", "must be >= 0"),
    ],
)
def test_bad_fields_are_named(change: dict[str, object], path: str, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_workload({**GOOD, **change})
    found = refused.value.by_field()
    assert path in found, found
    assert any(message in text for text in found[path]), found[path]


def test_every_error_comes_at_once() -> None:
    bad = {**GOOD, "engine": [{"kv_tokens": 0}], "event": [{"kind": "meteor"}]}
    with pytest.raises(ConfigError) as refused:
        parse_workload(bad)
    assert {"engine[0].kv_tokens", "event[0].kind", "event[0].at_s"} <= set(
        refused.value.by_field()
    )
