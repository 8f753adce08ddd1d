"""Reads: what the API (and the dashboard) ask of runs, their records and the engines.

Each function returns a queryset or plain values, so views stay thin and every query is in
one place where its index can be checked: decisions and samples are read by (run, time), the
index the reporter writes them under. Engine samples, downsampled, are read by
``sample_series``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from controlplane.runs.models import (
    Decision,
    Engine,
    EvalRecord,
    Override,
    PoolClaim,
    Run,
    RunState,
    StepRecord,
)
from workers.core.controller.records import ControllerConfig
from workers.core.sharing import Claim, leader_of, pool_of

ACTIVE = (RunState.QUEUED, RunState.RUNNING, RunState.STOPPING, RunState.PAUSED)
HOSTED = (RunState.RUNNING, RunState.STOPPING)

# -- runs ----------------------------------------------------------------------------------


def run_list(
    *,
    states: Sequence[str] = (),
    name: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
) -> QuerySet[Run]:
    runs = Run.objects.select_related("created_by")
    if states:
        runs = runs.filter(state__in=states)
    if name:
        runs = runs.filter(name__icontains=name)
    if created_after is not None:
        runs = runs.filter(created_at__gt=created_after)
    if created_before is not None:
        runs = runs.filter(created_at__lt=created_before)
    return runs


def run_get(run_id: int) -> Run | None:
    return Run.objects.select_related("created_by").filter(pk=run_id).first()


def run_cap_bounds(run: Run) -> tuple[int, int]:
    """The run's (min_inflight, max_inflight), as its stored config sets them: the bounds its
    controller refuses a pin or set outside of."""
    defaults = ControllerConfig()
    concurrency = run.config.get("concurrency") if isinstance(run.config, dict) else None
    if not isinstance(concurrency, dict):
        return defaults.min_inflight, defaults.max_inflight
    low = concurrency.get("min_inflight", defaults.min_inflight)
    high = concurrency.get("max_inflight", defaults.max_inflight)
    if not isinstance(low, int) or not isinstance(high, int):
        return defaults.min_inflight, defaults.max_inflight
    return low, high


POLICIES = ("pacer", "reference", "fixed", "gradient2")


def policy_name(config: Any) -> str:
    """The concurrency policy a stored config names; ``pacer`` (the default) when it names
    none, or one this version does not know."""
    concurrency = config.get("concurrency") if isinstance(config, dict) else None
    policy = concurrency.get("policy") if isinstance(concurrency, dict) else None
    return policy if policy in POLICIES else "pacer"


def max_steps(config: Any) -> int | None:
    """The steps a stored config asks for; None when it says none (the schema's default)."""
    value = config.get("max_steps") if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def trainer_mode(run: Run) -> str:
    trainer = run.config.get("trainer") if isinstance(run.config, dict) else None
    mode = trainer.get("mode") if isinstance(trainer, dict) else None
    return mode if isinstance(mode, str) else "none"


# -- decisions, overrides, steps, evals ------------------------------------------------------


def decision_list(
    run: Run,
    *,
    kinds: Sequence[str] = (),
    since: datetime | None = None,
    after_id: int | None = None,
) -> QuerySet[Decision]:
    """Oldest first. ``after_id``: those stored after that decision (ids grow in the order a
    run's one reporter stores them), for a client resuming where it stopped; not by time,
    since two flushes' wall times may tie or, across a clock step, go backwards."""
    decisions = Decision.objects.filter(run=run).select_related("override")
    if kinds:
        decisions = decisions.filter(kind__in=kinds)
    if since is not None:
        decisions = decisions.filter(at__gt=since)
    if after_id is not None:
        decisions = decisions.filter(pk__gt=after_id)
    return decisions.order_by("at", "id")


def override_list(run: Run) -> QuerySet[Override]:
    return (
        Override.objects.filter(run=run)
        .select_related("created_by", "decision")
        .order_by("created_at", "id")
    )


def override_get(run: Run, override_id: int) -> Override | None:
    return override_list(run).filter(pk=override_id).first()


def step_list(run: Run, *, after: int | None = None) -> QuerySet[StepRecord]:
    steps = StepRecord.objects.filter(run=run)
    if after is not None:
        steps = steps.filter(step__gt=after)
    return steps.order_by("step")


def eval_list(run: Run) -> QuerySet[EvalRecord]:
    return EvalRecord.objects.filter(run=run).order_by("wave")


# -- exports: keyset chunks, so no query holds more than one chunk --------------------------

DECISION_COLUMNS = (
    "id",
    "run_id",
    "step",
    "at",
    "kind",
    "cause",
    "signal",
    "cap_before",
    "cap_after",
    "reason",
    "shed",
    "shadow_before",
    "shadow_after",
    "alert",
    "applied",
    "figures",
    "engine",
    "override__id",
)
STEP_COLUMNS = (
    "step",
    "run_id",
    "started_at",
    "written_at",
    "seconds",
    "policy_version",
    "episodes",
    "tokens",
    "reward_mean",
    "reward_std",
    "generated_tokens",
    "finished_train",
    "finished_eval",
    "failed",
    "cancelled",
    "dropped_groups",
    "cap",
    "inflight",
    "path",
    "sampled_versions",
    "acked_at",
    "acked_version",
    "acked_checkpoint",
)


def decision_chunk(run_id: int, after: tuple[datetime, int] | None, size: int) -> list[dict]:
    rows = Decision.objects.filter(run_id=run_id)
    if after is not None:
        rows = rows.filter(Q(at__gt=after[0]) | Q(at=after[0], pk__gt=after[1]))
    return list(rows.order_by("at", "id").values(*DECISION_COLUMNS)[:size])


def step_chunk(run_id: int, after: int | None, size: int) -> list[dict]:
    rows = StepRecord.objects.filter(run_id=run_id)
    if after is not None:
        rows = rows.filter(step__gt=after)
    return list(rows.order_by("step").values(*STEP_COLUMNS)[:size])


def chunk_key(table: str, row: dict) -> Any:
    """Where the next chunk starts after ``row``."""
    return (row["at"], row["id"]) if table == "decisions" else row["step"]


def export_chunk(table: str, run_id: int, after: Any, size: int) -> list[dict]:
    if table == "decisions":
        return decision_chunk(run_id, after, size)
    return step_chunk(run_id, after, size)


def export_chunks(table: str, run_id: int, size: int) -> Iterator[list[dict]]:
    after = None
    while True:
        rows = export_chunk(table, run_id, after, size)
        if not rows:
            return
        yield rows
        if len(rows) < size:
            return
        after = chunk_key(table, rows[-1])


# -- engines and their health ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EngineView:
    engine: Engine
    status: str  # up, stale, down, unknown (never seen by a run)
    staleness_s: float | None
    runs: list[int]  # active runs whose config names it
    warnings: list[str]


def engine_list() -> list[EngineView]:
    engines = list(Engine.objects.order_by("name"))
    return engine_views(engines)


def engine_get(name: str) -> EngineView | None:
    engine = Engine.objects.filter(name=name).first()
    return None if engine is None else engine_views([engine])[0]


def engine_views(engines: list[Engine]) -> list[EngineView]:
    """Each engine's health from the last poll of any run, and for each running run that uses
    it, a warning when the run's cap exceeds its engines x max_num_seqs (the batch limit
    vLLM does not report: requests queue on it before KV fills, hiding KV pressure)."""
    now = timezone.now()
    registry = {e.name: e for e in Engine.objects.all()}
    active = list(Run.objects.filter(state__in=ACTIVE).only("id", "state", "cap", "config"))
    uses = {run.pk: _run_engines(run, registry) for run in active}
    views = []
    for engine in engines:
        runs = sorted(r.pk for r in active if any(u.name == engine.name for u in uses[r.pk]))
        warnings = [
            warning
            for run in active
            if run.pk in runs and run.state in HOSTED
            for warning in [_batch_limit(run, uses[run.pk])]
            if warning
        ]
        staleness = None if engine.last_seen_at is None else (now - engine.last_seen_at)
        views.append(
            EngineView(
                engine,
                _status(engine, staleness),
                None if staleness is None else staleness.total_seconds(),
                runs,
                warnings,
            )
        )
    return views


def _status(engine: Engine, staleness: timedelta | None) -> str:
    if staleness is None:
        return "unknown"
    if staleness.total_seconds() > settings.PACER_ENGINE_STALE_S:
        return "stale"
    health = engine.last_health.get("health") if isinstance(engine.last_health, dict) else None
    return health if health in ("up", "stale", "down") else "unknown"


@dataclass(frozen=True, slots=True)
class _Use:
    name: str | None  # the registered name, when it is one
    role: str
    max_num_seqs: int | None


def _run_engines(run: Run, registry: dict[str, Engine]) -> list[_Use]:
    listed = run.config.get("engine") if isinstance(run.config, dict) else None
    by_url = {e.url.rstrip("/"): e for e in registry.values()}
    found = []
    for entry in listed if isinstance(listed, list) else []:
        if not isinstance(entry, dict):
            continue
        url = entry.get("url")
        row = registry.get(entry.get("name") or "") or (
            by_url.get(url.rstrip("/")) if isinstance(url, str) else None
        )
        seqs = entry.get("max_num_seqs") or (row.max_num_seqs if row else None)
        role = entry.get("role") or (row.role if row else "unified")
        found.append(_Use(row.name if row else None, str(role), seqs))
    return found


def _batch_limit(run: Run, engines: Iterable[_Use]) -> str | None:
    decoding = [e for e in engines if e.role != "prefill"]
    if run.cap is None or not decoding or any(e.max_num_seqs is None for e in decoding):
        return None  # an unknown limit cannot be compared; a guessed one would cry wolf
    total = sum(int(e.max_num_seqs or 0) for e in decoding)
    if run.cap <= total:
        return None
    return (
        f"run {run.pk}: cap {run.cap} exceeds {len(decoding)} engines x max_num_seqs = {total}: "
        "requests queue on the batch limit before KV fills, hiding KV pressure; raise "
        "--max-num-seqs"
    )


def engine_in_use(engine: Engine) -> list[int]:
    """Active runs whose config names the engine, which must not lose it."""
    registry = {e.name: e for e in Engine.objects.all()}
    return sorted(
        run.pk
        for run in Run.objects.filter(state__in=ACTIVE).only("id", "config")
        if any(u.name == engine.name for u in _run_engines(run, registry))
    )


def pending_override_count() -> QuerySet[Any]:
    return (
        Override.objects.filter(applied_at__isnull=True, error="")
        .values("run_id")
        .annotate(n=Count("id"))
        .order_by()
    )


# -- pools ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolView:
    """Runs that share engines, as their claims say now (``workers.core.sharing``)."""

    engines: list[str]  # every engine a run of the pool claims, sorted
    level: int  # the pool's in-flight level: its leader's
    leader: int  # the run whose controller sizes the pool
    runs: list[PoolClaim]  # with ``run`` loaded, by run id, each marked ``overdue``


def pool_list() -> list[PoolView]:
    """The pools now, from the claims the arbiter counts, grouped by its own rule: each run
    with the runs it shares an engine with (``pool_of``), the groups contained in another left
    out (a run that shares with two runs that share nothing: the middle one's pool). A run
    alone on its engines is in no pool."""
    counted = PoolClaim.objects.counted().select_related("run")
    rows = {row.run_id: row for row in counted}
    claims = {run_id: row.as_claim() for run_id, row in rows.items()}
    for run_id, row in rows.items():
        row.overdue = claims[run_id].overdue  # type: ignore[attr-defined]
    every = list(claims.values())
    groups = {frozenset(c.run_id for c in pool_of(run_id, every)) for run_id in rows}
    pools = [g for g in groups if len(g) > 1 and not any(g < other for other in groups)]
    return [
        _pool_view([rows[run_id] for run_id in sorted(g)], [claims[run_id] for run_id in g])
        for g in sorted(pools, key=min)
    ]


def _pool_view(found: list[PoolClaim], stated: list[Claim]) -> PoolView:
    leader = leader_of(stated)
    return PoolView(
        engines=sorted({url for row in found for url in row.engines}),
        level=int(leader.level),
        leader=leader.run_id,
        runs=found,
    )
