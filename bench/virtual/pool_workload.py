"""Multi-run workload files: several runs on the same simulated engines, each with its own
environments, size, start and end, share and priority (``python -m bench share``).

    [workload]          name, description
    [pool]              seconds, poll_interval_s: the horizon and every run's poll period
    [[engine]]          as in a single-run workload: the engines every run shares
    [[run]]             name, start_s, end_s (default: the horizon), host_dies (default
                        false), share (default 1), priority (default 0), batch_size,
                        group_size, max_off_policy_steps, seed, and its own [[run.env]] tables

A run ends at ``end_s`` as a run stopped by its operator does: its claim leaves the pool at once.
With ``host_dies`` its host dies there instead: its episodes are aborted with it, and its claim
stays in the exchange, as a dead host's row does in the database, until it goes stale
(``workers.core.sharing.CLAIM_TTL_S``).

Each run is read as a single-run workload of its own (``parse_workload``), so its
environments and sizes are checked by the same rules and its errors carry its path
(``run[1].env[0].args.turns``). The policy is the CLI's, the same for every run. The files are
named ``s*.toml``: the suite (``bench report``) reads only ``w*.toml``, which have one run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.virtual.engines import EngineShape
from bench.virtual.workload import MAX_SECONDS, RUN_KEYS, Workload, parse_workload, read_toml
from workers.core.config.fields import ConfigError, Errors, Table, join


@dataclass(frozen=True, slots=True)
class PoolRun:
    """One run of a multi-run workload: when it runs, its part of the pool, and the
    single-run workload it is (its environments and sizes on the shared engines)."""

    run_id: int  # 1, 2, ... in file order
    name: str
    start_s: float
    end_s: float
    share: float
    priority: int
    workload: Workload
    host_dies: bool = False  # at end_s its host dies rather than ending the run


@dataclass(frozen=True, slots=True)
class PoolWorkload:
    name: str
    description: str
    seconds: float
    poll_interval_s: float
    engines: tuple[EngineShape, ...]
    runs: tuple[PoolRun, ...]
    path: str

    def alone(self, run: PoolRun) -> PoolWorkload:
        """Only ``run``, from 0 s to the horizon: the single run the pool is compared with."""
        solo = dataclasses.replace(run, start_s=0.0, end_s=self.seconds)
        return dataclasses.replace(self, runs=(solo,))


def load_pool_workload(path: str | Path) -> PoolWorkload:
    """Read and check a multi-run workload file; ConfigError lists every problem."""
    return parse_pool_workload(read_toml(path), str(path))


def parse_pool_workload(document: object, path: str = "<workload>") -> PoolWorkload:
    errors = Errors()
    top = Table(document, "", errors)
    meta = top.table("workload")
    name = meta.string("name")
    description = meta.string("description", "")
    meta.finish()
    pool = top.table("pool")
    seconds = pool.number("seconds", 1200.0, low=1.0, high=MAX_SECONDS)
    poll = pool.number("poll_interval_s", 5.0, low=0.1, high=3600.0)
    pool.finish()
    engines_doc = top.raw("engine", None)
    tables: list[Table] = []
    if isinstance(top.raw("run", None), dict):
        errors.add("run", "a multi-run workload has [[run]] tables; [run] is a single run's")
    else:
        tables = top.tables("run")
    runs = [
        _run(table, index, name or "pool", engines_doc, seconds or MAX_SECONDS, poll or 5.0)
        for index, table in enumerate(tables)
    ]
    top.finish()
    if not errors.found and len(runs) < 2:
        errors.add("run", f"a multi-run workload has at least two [[run]] tables, got {len(runs)}")
    names = [run[0] for run in runs if run[0] is not None]
    for index, run_name in enumerate(names):
        if run_name in names[:index]:
            errors.add(f"run[{index}].name", f"{run_name!r} names two runs")
    for index, (_, read) in enumerate(runs):
        if isinstance(read, ConfigError):
            _take(errors, read, index)
    errors.raise_if_any()
    made = tuple(run for _, run in runs if isinstance(run, PoolRun))
    return PoolWorkload(
        name=name,
        description=description,
        seconds=seconds,
        poll_interval_s=poll,
        engines=made[0].workload.engines,
        runs=made,
        path=path,
    )


def _run(
    table: Table, index: int, pool: str, engines: Any, seconds: float, poll: float
) -> tuple[str | None, PoolRun | ConfigError | None]:
    """One ``[[run]]``: its name and the run, or the errors of its single-run reading."""
    name = table.string("name", f"run{index + 1}")
    start = table.number("start_s", 0.0, low=0.0, high=seconds)
    end = table.number("end_s", seconds, low=0.0, high=seconds)
    share = table.number("share", 1.0, low=1e-3, high=1e3)
    priority = table.integer("priority", 0, low=-100, high=100)
    dies = table.boolean("host_dies", False)
    sizes = {key: table.raw(key) for key in RUN_KEYS if table.has(key)}
    for key in RUN_KEYS:
        table.raw(key, None)
    envs = table.raw("env", [])
    table.finish()
    if start is not None and end is not None and end <= start:
        table.errors.add(f"{table.path}.end_s", f"must be after start_s ({start:g}), got {end:g}")
        return name, None
    single = {
        "workload": {"name": f"{pool}/{name}"},
        "run": {"seconds": seconds, "poll_interval_s": poll, **sizes},
        "engine": engines,
        "env": envs,
    }
    try:
        workload = parse_workload(single, f"{pool} run {name}")
    except ConfigError as refused:
        return name, refused
    if name is None or start is None or end is None or share is None or priority is None:
        return name, None
    return name, PoolRun(index + 1, name, start, end, share, priority, workload, dies)


def _take(errors: Errors, refused: ConfigError, index: int) -> None:
    """A run's single-run errors under its own path; those of the shared engines once."""
    for error in refused.errors:
        head = error.path.split(".", 1)[0].split("[", 1)[0]
        if head == "engine":
            if index == 0:
                errors.add(error.path, error.message)
        elif head == "run":
            errors.add(f"run[{index}]{error.path.removeprefix('run')}", error.message)
        else:
            errors.add(join(f"run[{index}]", error.path), error.message)
