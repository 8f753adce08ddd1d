"""Engines that join and leave a benchmark run: the events as read, and short virtual runs
through the orchestrator's own add_engine and remove_engine.

Two small engines, engine 1 not in the run until it joins (or in it until it leaves); a
minute of virtual time costs about a wall second.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.virtual.outcome import RunOutcome
from bench.virtual.run import run_workload
from bench.virtual.workload import parse_workload
from workers.core.config.fields import ConfigError
from workers.core.members import DEFAULT_DRAIN_S

BASE: dict[str, Any] = {
    "workload": {"name": "pool"},
    "run": {"seconds": 60, "batch_size": 8, "group_size": 4, "seed": 2},
    "engine": [{"count": 2, "kv_tokens": 8192, "max_model_len": 1024, "step_overhead_s": 0.04}],
    "env": [{"name": "longtail", "args": {"prompt_tokens": 64, "completion_tokens": 100}}],
}
JOIN = {"at_s": 20, "kind": "engine_join", "engine": 1}
LEAVE = {"at_s": 20, "kind": "engine_leave", "engine": 1, "drain_s": 10}


def events(*tables: dict[str, Any]) -> dict[str, Any]:
    return {**BASE, "event": list(tables)}


def test_an_engine_that_joins_is_out_of_the_run_until_then() -> None:
    workload = parse_workload(events(JOIN, {**LEAVE, "at_s": 40}))
    assert workload.joining == {"unified-0-1"}
    assert [e.drain_s for e in workload.events] == [DEFAULT_DRAIN_S, 10.0]
    assert workload.with_every_engine().joining == frozenset()


@pytest.mark.parametrize(
    ("tables", "path", "message"),
    [
        ([{**JOIN, "engine": 7}], "event[0].engine", "an engine index 0..1"),
        ([{**JOIN, "engine": None}], "event[0].engine", "names one engine"),
        ([{"at_s": 5, "kind": "engine_leave"}], "event[0].engine", "names one engine"),
        ([LEAVE, {**LEAVE, "at_s": 30}], "event[1].engine", "not in the run at 30 s"),
        ([{**LEAVE, "at_s": 5}, JOIN], "event[0].engine", "not in the run at 5 s"),
        ([JOIN, {**JOIN, "at_s": 30}], "event[1].engine", "is in the run at 30 s"),
        ([JOIN, LEAVE, {**JOIN, "at_s": 30}], "event[2].engine", "joins a run once"),
        ([{**LEAVE, "engine": 0}, LEAVE], "event[1].engine", "the run's last engine"),
        ([JOIN, {**JOIN, "engine": 0}], "event", "one must be in the run at 0 s"),
        ([{**LEAVE, "drain_s": -1}], "event[0].drain_s", "must be >= 0"),
        ([JOIN, {"at_s": 5, "kind": "engine_down", "engine": 1}], "event[1].engine", "not in"),
    ],
)
def test_bad_pool_events_are_refused(tables: list[dict[str, Any]], path: str, message: str) -> None:
    document = events(*({k: v for k, v in t.items() if v is not None} for t in tables))
    with pytest.raises(ConfigError) as refused:
        parse_workload(document)
    found = refused.value.by_field()
    assert path in found, found
    assert any(message in text for text in found[path]), found[path]


def engine(run: RunOutcome, name: str) -> tuple[int, float, float]:
    (seen,) = [e for e in run.by_engine if e.engine == name]
    return seen.episodes, seen.first_start, seen.last_start


@pytest.mark.parametrize("trainer", [None, {"updates": "rolling", "train_s": 2.0}])
def test_an_engine_joins_takes_episodes_and_the_cap_is_rescaled(
    trainer: dict[str, Any] | None,
) -> None:
    """With a trainer in the loop the joining engine comes with its weight routes and is
    brought to the run's version before it is routed to."""
    document = events(JOIN) | ({} if trainer is None else {"trainer": trainer})
    run = run_workload(parse_workload(document), "pacer")
    episodes, first, _ = engine(run, "unified-0-1")
    assert episodes > 0 and first >= 20.0
    kinds = [(d.kind, d.cause) for d in run.pool_decisions]
    assert ("engine-join", "operator") in kinds
    (rescale,) = [d for d in run.pool_decisions if d.cause == "engine joined"]
    assert rescale.kind == "rescale" and rescale.at >= 20.0
    # Never polled before it joined: the pool was engine 0's KV alone until then.
    assert "unified-0-1 joined: KV 8k -> 16k tokens" in rescale.reason, rescale.reason


def test_an_engine_that_leaves_gets_nothing_new_and_leaves() -> None:
    run = run_workload(parse_workload(events(LEAVE)), "pacer")
    episodes, _, last = engine(run, "unified-0-1")
    assert episodes > 0 and last < 20.0
    assert engine(run, "unified-0-0")[2] > 20.0
    drain, leave = [d for d in run.pool_decisions if d.kind.startswith("engine-")]
    assert (drain.kind, drain.at) == ("engine-drain", 20.0)
    assert leave.kind == "engine-leave" and 20.0 <= leave.at <= 30.0 + 5.0
    assert any(d.cause == "engine left" for d in run.pool_decisions)
