"""``bench fit --run ID`` against the control plane's database: rows a hosted run leaves
(a run, its steps, its engines' samples) become a workload file ``bench run`` reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench.virtual.cli import main
from bench.virtual.workload import load_workload
from controlplane.runs.models import Engine, EngineSample, Run, RunState, StepRecord

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = {
    "name": "recorded",
    "batch_size": 8,
    "group_size": 4,
    "env": [{"name": "longtail", "args": {"completion_tokens": 64}}],
    "engine": [{"name": "sim-a"}, {"url": "http://b:8000", "max_num_seqs": 64}],
}


def sample(run: Run, engine: str, at: float, kv: int) -> EngineSample:
    return EngineSample.objects.create(
        run=run,
        at=T0 + timedelta(seconds=at),
        engine_id=engine,
        role="unified",
        health="up",
        kv_capacity_tokens=kv,
        max_model_len=1024,
        kv_usage=0.5,
        num_running=4,
        num_waiting=0,
        num_preemptions=0,
        prefix_cache_hits=0,
        prefix_cache_queries=0,
        generation_tokens=0,
    )


def step(run: Run, number: int, tokens: int) -> StepRecord:
    return StepRecord.objects.create(
        run=run,
        step=number,
        started_at=T0 + timedelta(seconds=10 * (number - 1)),
        written_at=T0 + timedelta(seconds=10 * number),
        seconds=10.0,
        policy_version=number,
        episodes=8,
        tokens=tokens,
        reward_mean=0.0,
        reward_std=0.0,
        generated_tokens=tokens,
        finished_train=8,
        finished_eval=0,
        failed=0,
        cancelled=0,
        dropped_groups=0,
        cap=16,
        inflight=8,
        path="",
    )


def test_a_recorded_run_becomes_a_workload_file(tmp_path: Path) -> None:
    Engine.objects.create(name="sim-a", url="http://a:8000", max_num_seqs=32)
    run = Run.objects.create(
        name="recorded", config=CONFIG, state=RunState.COMPLETED, started_at=T0
    )
    for at in (0.0, 5.0):
        sample(run, "sim-a", at, 4096)
        sample(run, "http://b:8000", at, 8192)
    step(run, 1, 800)
    step(run, 2, 1600)
    out = tmp_path / "fit.toml"
    main(["fit", "--run", str(run.pk), "--out", str(out)])
    workload = load_workload(out)
    assert workload.seconds == 20.0
    assert [(e.kv_tokens, e.max_num_seqs) for e in workload.engines] == [(8192, 64), (4096, 32)]
    assert workload.document["env"][0]["args"]["completion_tokens"] == 150.0  # 2,400 / 16
    assert (workload.document["batch_size"], workload.document["group_size"]) == (8, 4)


def test_an_unknown_run_is_an_error_not_a_file(tmp_path: Path) -> None:
    out = tmp_path / "fit.toml"
    with pytest.raises(SystemExit) as ended:
        main(["fit", "--run", "999999", "--out", str(out)])
    assert ended.value.code == 2 and not out.exists()
