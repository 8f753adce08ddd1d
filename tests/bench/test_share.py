"""Runs sharing engines in the virtual benchmark: the multi-run workload format as read, and
short virtual runs arbitrated by the pool rule through the in-memory claims exchange.

Two small engines; run 2 starts at 20 s, run 1 ends at 100 s; under the reference policy a
short horizon costs a few wall seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.virtual.pool_workload import parse_pool_workload
from bench.virtual.share import jain, shipped_pools
from bench.virtual.shared import PoolOutcome, run_pool
from bench.virtual.suite import shipped_workloads
from bench.virtual.workload import parse_workload
from workers.core.config.fields import ConfigError
from workers.core.sharing import CLAIM_TTL_S

ENV = [{"name": "longtail", "args": {"prompt_tokens": 64, "completion_tokens": 100}}]
SIZE = {"batch_size": 8, "group_size": 4}
POOL: dict[str, Any] = {
    "workload": {"name": "pool"},
    "pool": {"seconds": 160},
    "engine": [{"count": 2, "kv_tokens": 4096, "max_model_len": 1024, "step_overhead_s": 0.04}],
    "run": [
        {"name": "a", "end_s": 100, "seed": 1, **SIZE, "env": ENV},
        {"name": "b", "start_s": 20, "seed": 2, **SIZE, "env": ENV},
    ],
}


@pytest.fixture(scope="module")
def shared() -> PoolOutcome:
    return run_pool(parse_pool_workload(POOL), "reference")


def test_each_run_is_read_as_a_workload_of_its_own_on_the_shared_engines() -> None:
    pool = parse_pool_workload(POOL)
    assert [(r.run_id, r.name, r.start_s, r.end_s, r.share) for r in pool.runs] == [
        (1, "a", 0.0, 100.0, 1.0),
        (2, "b", 20.0, 160.0, 1.0),
    ]
    assert [e.name for e in pool.engines] == ["unified-0-0", "unified-0-1"]
    assert pool.runs[1].workload.document["seed"] == 2
    alone = pool.alone(pool.runs[1])
    assert [(r.start_s, r.end_s) for r in alone.runs] == [(0.0, 160.0)]


def bad(**changes: Any) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        parse_pool_workload({**POOL, **changes})
    return [str(error) for error in refused.value.errors]


def test_the_format_refuses_bad_runs_with_their_paths() -> None:
    a, b = POOL["run"]
    assert bad(run=[a]) == ["run: a multi-run workload has at least two [[run]] tables, got 1"]
    assert bad(run=[a, {**b, "name": "a"}]) == ["run[1].name: 'a' names two runs"]
    ended = bad(run=[a, {**b, "end_s": 10}])
    assert ended == ["run[1].end_s: must be after start_s (20), got 10"]
    assert bad(run=[a, {**b, "start_s": 500}]) == ["run[1].start_s: must be <= 160, got 500.0"]
    assert bad(run=[a, {**b, "share": 0}]) == ["run[1].share: must be >= 0.001, got 0.0"]
    wrong = bad(run=[a, {**b, "env": [{"name": "longtail", "args": {"turns": 2}}]}])
    assert wrong and all(error.startswith("run[1].env[0]") for error in wrong)
    assert bad(run=[a, {**b, "batch_size": 0}])[0].startswith("run[1].batch_size:")
    assert bad(run=[a, {**b, "policy": "pacer"}])[0].startswith("run[1].policy: unknown key")


def test_the_format_refuses_a_single_runs_file_and_shared_keys_in_a_run() -> None:
    single = {key: value for key, value in POOL.items() if key != "run"}
    assert bad(**single, run={"seconds": 60}) == [
        "run: a multi-run workload has [[run]] tables; [run] is a single run's"
    ]
    engine = {"count": 1, "kv_tokens": 1}
    assert bad(engine=[engine]) == ["engine[0].kv_tokens: must hold one block (16)"]
    a, b = POOL["run"]
    assert bad(run=[a, {**b, "engine": [engine]}])[0].startswith("run[1].engine: unknown key")


def test_two_equal_runs_on_shared_engines_both_get_a_share(shared: PoolOutcome) -> None:
    together = [p for p in shared.points if 60 <= p.at <= 100]
    assert together and all(len(p.runs) == 2 for p in together)
    for point in together:
        ceilings = [r.ceiling for r in point.runs]
        assert None not in ceilings and min(ceilings) >= 4, (point.at, ceilings)
        # The pool is re-split from episodes in flight, which move by a group at a time, and
        # a follower's claim lags a look: while the pool grows, one run may lead by a group.
        assert max(ceilings) - min(ceilings) <= SIZE["group_size"], (point.at, ceilings)  # type: ignore[operator]
    held = [[r.inflight for r in p.runs] for p in together]
    assert min(min(pair) for pair in held) >= 4, held
    shares = [
        sum(p.runs[0].kv_tokens for p in together),
        sum(p.runs[1].kv_tokens for p in together),
    ]
    assert jain(shares) > 0.9, shares


def test_a_share_decision_is_recorded_with_its_reason(shared: PoolOutcome) -> None:
    started, *later = shared.decisions[2]
    assert (started.kind, started.at) == ("bootstrap", 20.0)  # it starts at its part
    assert "pool unified-0-0, unified-0-1 with run 1 x1 p0" in started.reason
    assert "sized by run 1" in started.reason  # the run there first sizes the pool
    assert any(d.kind == "share" for d in later)
    assert any(d.kind == "share" for d in shared.decisions[1])


def test_a_run_that_ends_hands_its_share_back(shared: PoolOutcome) -> None:
    last = shared.decisions[2][-1]
    assert last.kind == "share" and 100 <= last.at <= 105
    assert "no other run shares its engines: ceiling" in last.reason
    before = next(p for p in reversed(shared.points) if p.at <= 100).runs
    # run 2 arbitrates at 100 s just before run 1 ends then, and next at 105 s, after the
    # look at 105 s: its ceiling is gone from the look at 110 s on
    after = [p for p in shared.points if p.at >= 110]
    assert all(p.runs[0].ceiling is None for p in after)
    assert max(p.runs[0].inflight for p in after) > max(r.inflight for r in before)


@pytest.mark.parametrize("policy", ["reference", "pacer"])
def test_a_run_whose_host_dies_keeps_its_part_until_its_claim_goes_stale(policy: str) -> None:
    """Its episodes are aborted at once; its claim counts until it is ``CLAIM_TTL_S`` old.
    Meanwhile the leader does not grow the pool's level: the engines emptied of the dead
    run's episodes are no reason to, once the claim is overdue (renewed every second here,
    so from 3 s after its last renewal)."""
    a, b = POOL["run"]
    dying = {
        **POOL,
        "pool": {"seconds": 160, "poll_interval_s": 1.0},
        "run": [{**a, "end_s": 160}, {**b, "end_s": 100, "host_dies": True}],
    }
    outcome = run_pool(parse_pool_workload(dying), policy)
    survivor = {p.at: p.of(1) for p in outcome.points}
    held = [survivor[at] for at in range(105, 119)]
    assert all(r.ceiling is not None for r in held)  # the claim still counts...
    assert all(r.cap <= held[0].cap for r in held), held  # ...and the level does not grow
    assert survivor[100 + CLAIM_TTL_S + 5].ceiling is None  # the part is its own again
    assert parse_pool_workload(dying).runs[1].host_dies
    assert bad(run=[a, {**b, "host_dies": "yes"}]) == [
        "run[1].host_dies: must be true or false, got 'yes'"
    ]


def test_the_multi_run_workloads_stay_out_of_the_suite() -> None:
    pools = {Path(path).name for path in shipped_pools()}
    assert pools == {
        "s1_two_equal.toml",
        "s2_mixed_shapes.toml",
        "s3_priority.toml",
        "s4_host_dies.toml",
    }
    assert not pools & {Path(path).name for path in shipped_workloads()}


def test_a_single_run_file_points_to_the_share_command() -> None:
    single = {"workload": {"name": "w"}, "run": [{"seconds": 60}], "engine": [{}], "env": ENV}
    with pytest.raises(ConfigError) as refused:
        parse_workload(single)
    assert [str(e) for e in refused.value.errors] == [
        "run: [[run]] tables make a multi-run workload: python -m bench share reads it"
    ]


def test_jain_index() -> None:
    assert jain([1.0, 1.0]) == 1.0
    assert jain([1.0, 0.0]) == 0.5


def test_a_priority_run_takes_over_the_slots_it_displaces_as_they_free() -> None:
    """Run 2 (priority 1) joins a pool run 1 fills: it holds its part once run 1's episodes
    have finished (a few seconds), not at its dispatcher's pace for fresh admissions (a
    group of 4 per 5 s window at these caps), and never with the pool over its level by more
    than a group."""
    urgent = {**POOL["run"][1], "priority": 1, "start_s": 60, "end_s": 120}
    pool = run_pool(
        parse_pool_workload({**POOL, "pool": {"seconds": 120}, "run": [POOL["run"][0], urgent]}),
        "reference",
    )
    during = [p for p in pool.points if 60 < p.at <= 120 and len(p.runs) == 2]
    trace = [(p.at, [(r.inflight, r.cap, r.ceiling) for r in p.runs]) for p in during]
    held = next(p for p in during if p.runs[1].inflight >= 0.9 * (p.runs[1].ceiling or 0))
    assert held.at - 60 <= 15, trace  # at the admission pace: 50 s
    # The pool's level is about the largest cap (the run that holds nearly all of it).
    over = [p for p in during if sum(r.inflight for r in p.runs) > max(r.cap for r in p.runs) + 4]
    assert not over, trace
