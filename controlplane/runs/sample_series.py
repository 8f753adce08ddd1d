"""Reading engine samples downsampled by the database, on PostgreSQL (production, tests) and
SQLite (the quick start).

``EpochBin(at, step)`` is ``floor(epoch seconds of at / step)``: samples with the same value
share a bin, which starts at ``value * step`` seconds after the epoch. Grouping by it lets the
database reduce a week of polls to a page of points in one indexed scan.

A long run's samples are also rolled up (runs.rollups) into bins of 60 s, 10 min and 1 h. A
step that is a multiple of a tier reads the coarsest such tier's bins below its watermark and
raw samples for the rest (after the watermark, and the part of a tier bin cut by ``since`` or
``until``), added up as sums and counts: the answer is the one raw samples alone give.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import NotSupportedError, connections
from django.db.models import BigIntegerField, Count, F, Func, Max, Min, Q, QuerySet, Sum

from controlplane.runs.models import EngineSample, RollupWatermark, Run, SampleRollup
from controlplane.runs.rollups import FINEST_S, TIERS_S, ceil_to, floor_to

# Steps a downsampled series snaps to, so two charts of one run line up.
NICE_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)


class EpochBin(Func):
    output_field = BigIntegerField()

    def __init__(self, field: str, step_s: float) -> None:
        if not step_s > 0:
            raise ValueError(f"step_s must be > 0, got {step_s}")
        super().__init__(F(field))
        self.step_s = float(step_s)

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        at_sql, at_params = compiler.compile(self.source_expressions[0])
        if connection.vendor == "postgresql":
            sql = f"CAST(FLOOR(EXTRACT(EPOCH FROM {at_sql}) / %s) AS BIGINT)"
        elif connection.vendor == "sqlite":
            # julianday counts days from noon of 4714 BC; 2440587.5 of them is 1970-01-01. Its
            # days carry float error: seconds are rounded to the millisecond before dividing,
            # so 12:00:10 is never 12:00:09.99999; CAST truncates, which is floor after 1970.
            sql = f"CAST(ROUND((julianday({at_sql}) - 2440587.5) * 86400.0, 3) / %s AS INTEGER)"
        else:
            raise NotSupportedError(f"EpochBin has no SQL for {connection.vendor}")
        return sql, [*at_params, self.step_s]


@dataclass(frozen=True, slots=True)
class SampleSeries:
    step_s: float
    since: datetime | None
    until: datetime | None
    points: list[dict[str, Any]]


class TooManyPoints(ValueError):
    """The step asked for gives more points per engine than one answer holds."""

    def __init__(self, points: int, least_step_s: float) -> None:
        self.least_step_s = least_step_s
        super().__init__(
            f"gives {points} points per engine, more than {settings.PACER_SAMPLES_MAX_POINTS}: "
            f"use step_s >= {least_step_s:g}"
        )


class SamplesPruned(ValueError):
    """Raw samples of the range asked for were deleted by retention, and no rollup tier
    divides the step asked for."""

    def __init__(self, pruned_before: datetime) -> None:
        self.pruned_before = pruned_before
        super().__init__(
            f"this run's raw samples before {pruned_before.isoformat()} were deleted after "
            f"PACER_SAMPLE_RETENTION_S ({settings.PACER_SAMPLE_RETENTION_S:g} s) and are kept "
            f"in bins of {', '.join(f'{t} s' for t in TIERS_S)}: use a step_s that is a "
            f"multiple of {FINEST_S}, or since >= {pruned_before.isoformat()}"
        )


def sample_series(
    run: Run,
    *,
    engines: Sequence[str] = (),
    since: datetime | None = None,
    until: datetime | None = None,
    step_s: float | None = None,
) -> SampleSeries:
    """Each engine's samples in ``step_s`` bins: the mean of gauges (KV usage, running,
    waiting, the run's episodes in flight there), the sum of deltas (preemptions, generated
    tokens, prefix-cache hits and queries) and the rates they make over the seconds the bin's
    samples cover. The step defaults to the smallest nice one giving at most
    PACER_SAMPLES_MAX_POINTS bins (at least the finest tier where raw samples are gone).

    Where raw samples were deleted a tier bin is read whole, even where ``since`` or
    ``until`` cuts it: the raw samples that would cut it are gone."""
    pruned = run.samples_pruned_before
    reaches_pruned = pruned is not None and (since is None or since < pruned)
    samples = EngineSample.objects.filter(run=run)
    if engines:
        samples = samples.filter(engine_id__in=engines)
    if since is not None:
        samples = samples.filter(at__gte=since)
    if until is not None:
        samples = samples.filter(at__lt=until)
    if reaches_pruned and step_s is not None and _tier(step_s) is None:
        raise SamplesPruned(pruned)  # type: ignore[arg-type]
    step = _step(_span_s(run, samples, engines, since, until), step_s, reaches_pruned)
    tier = _tier(step)
    bins: dict[tuple[str, int], dict[str, Any]] = {}
    plan = _rollup_range(run, tier, since, until) if tier is not None else None
    if plan is not None:
        low, high = plan
        rolled = SampleRollup.objects.filter(run=run, tier_s=tier, start__lt=high)
        if low is not None:
            rolled = rolled.filter(start__gte=low)
            samples = samples.filter(Q(at__lt=low) | Q(at__gte=high))
        else:
            samples = samples.filter(at__gte=high)
        if engines:
            rolled = rolled.filter(engine_id__in=engines)
        _add(bins, rolled.annotate(bin=EpochBin("start", step)), _ROLLUP_SUMS)
    _add(bins, samples.annotate(bin=EpochBin("at", step)), _RAW_SUMS)
    points = [_point(key, bins[key], step) for key in sorted(bins)]
    return SampleSeries(step, since, until, points)


def _tier(step: float) -> int | None:
    """The coarsest rollup tier whose bins add up to bins of ``step``: one that divides it."""
    return next((t for t in reversed(TIERS_S) if step % t == 0), None)


def _rollup_range(
    run: Run, tier: int, since: datetime | None, until: datetime | None
) -> tuple[datetime | None, datetime] | None:
    """The tier bins to read, [low, high): whole bins within [since, until) below the tier's
    watermark, or the whole bins holding them where raw samples are gone; None: none."""
    mark = (
        RollupWatermark.objects.filter(run=run, tier_s=tier).values_list("until", flat=True).first()
    )
    if mark is None:
        return None
    pruned = run.samples_pruned_before

    def gone(moment: datetime) -> bool:
        return pruned is not None and moment < pruned

    low = None
    if since is not None:
        low = floor_to(since, tier) if gone(since) else ceil_to(since, tier)
    high = mark
    if until is not None:
        high = min(mark, ceil_to(until, tier) if gone(until) else floor_to(until, tier))
    if low is not None and low >= high:
        return None
    return low, high


# What each source sums per bin, under one set of names: raw samples, and rollups' sums.
_RAW_SUMS = {
    "n": Count("id"),
    "kv_sum": Sum("kv_usage"),
    "kv_max": Max("kv_usage"),
    "running_sum": Sum("num_running"),
    "waiting_sum": Sum("num_waiting"),
    "capacity_sum": Sum("num_waiting_capacity"),
    "capacity_n": Count("num_waiting_capacity"),
    "train_sum": Sum("inflight_train"),
    "eval_sum": Sum("inflight_eval"),
    "preemptions_sum": Sum("num_preemptions"),
    "tokens_sum": Sum("generation_tokens"),
    "hits_sum": Sum("prefix_cache_hits"),
    "queries_sum": Sum("prefix_cache_queries"),
    "seconds_sum": Sum("interval_s"),
    "staleness_max": Max("staleness_s"),
    "not_up": Count("id", filter=~Q(health="up")),
    "restarts": Count("id", filter=Q(restarted=True)),
}
_ROLLUP_SUMS = {
    "n": Sum("samples"),
    "kv_sum": Sum("kv_usage_sum"),
    "kv_max": Max("kv_usage_max"),
    "running_sum": Sum("num_running_sum"),
    "waiting_sum": Sum("num_waiting_sum"),
    "capacity_sum": Sum("num_waiting_capacity_sum"),
    "capacity_n": Sum("num_waiting_capacity_count"),
    "train_sum": Sum("inflight_train_sum"),
    "eval_sum": Sum("inflight_eval_sum"),
    "preemptions_sum": Sum("num_preemptions_sum"),
    "tokens_sum": Sum("generation_tokens_sum"),
    "hits_sum": Sum("prefix_cache_hits_sum"),
    "queries_sum": Sum("prefix_cache_queries_sum"),
    "seconds_sum": Sum("interval_s_sum"),
    "staleness_max": Max("staleness_s_max"),
    "not_up": Sum("not_up"),
    "restarts": Sum("restarts"),
}
_MAXIMA = ("kv_max", "staleness_max")


def _add(bins: dict[tuple[str, int], dict[str, Any]], rows: QuerySet, sums: dict) -> None:
    """Group ``rows`` by engine and bin in one query and add each group into ``bins``.

    The query's SQL is the ORM's, but its rows are read by the cursor: Django's per-value
    converters cost more than the database for a chart's thousands of bins (int() and
    float() in ``_point`` do their work)."""
    grouped = rows.values("engine_id", "bin").annotate(**sums).order_by()
    sql, params = grouped.query.sql_with_params()
    with connections[grouped.db].cursor() as cursor:
        cursor.execute(sql, params)
        names = [column[0] for column in cursor.description]
        fetched = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    for row in fetched:
        key = (row.pop("engine_id"), int(row.pop("bin")))
        into = bins.get(key)
        if into is None:
            bins[key] = row
            continue
        for name, value in row.items():
            if value is None:
                continue
            if into[name] is None:
                into[name] = value
            elif name in _MAXIMA:
                into[name] = max(into[name], value)
            else:
                into[name] += value


def _span_s(
    run: Run,
    samples: QuerySet[EngineSample],
    engines: Sequence[str],
    since: datetime | None,
    until: datetime | None,
) -> float:
    if since is not None and until is not None:
        return max(0.0, (until - since).total_seconds())
    found = samples.aggregate(first=Min("at"), last=Max("at"))
    first, last = found["first"], found["last"]
    if run.samples_pruned_before is not None and since is None:
        rolled = SampleRollup.objects.filter(run=run, tier_s=FINEST_S)
        if engines:
            rolled = rolled.filter(engine_id__in=engines)
        bounds = rolled.aggregate(first=Min("start"), last=Max("start"))
        first = bounds["first"] or first
        last = max((t for t in (last, bounds["last"]) if t is not None), default=None)
    first = since or first
    last = until or last
    if first is None or last is None:
        return 0.0
    return max(0.0, (last - first).total_seconds())


def _step(span_s: float, asked: float | None, reaches_pruned: bool) -> float:
    most = settings.PACER_SAMPLES_MAX_POINTS
    least = span_s / most
    if asked is not None:
        points = math.floor(span_s / asked) + 1
        if points > most:
            raise TooManyPoints(points, math.ceil(least))
        return asked
    if reaches_pruned:
        least = max(least, FINEST_S)
    for nice in NICE_STEPS_S:
        if nice >= least:
            return float(nice)
    return float(math.ceil(least / 86400) * 86400)


def _point(key: tuple[str, int], row: dict[str, Any], step: float) -> dict[str, Any]:
    n = row["n"]
    seconds = row["seconds_sum"] or 0.0
    tokens, preemptions = int(row["tokens_sum"] or 0), int(row["preemptions_sum"] or 0)
    hits, queries = int(row["hits_sum"] or 0), int(row["queries_sum"] or 0)
    capacity_n = int(row["capacity_n"] or 0)
    return {
        "engine": key[0],
        "at": datetime.fromtimestamp(key[1] * step, UTC),
        "samples": n,
        "kv_usage": row["kv_sum"] / n,
        "kv_usage_max": row["kv_max"],
        "num_running": int(row["running_sum"]) / n,
        "num_waiting": int(row["waiting_sum"]) / n,
        "num_waiting_capacity": int(row["capacity_sum"]) / capacity_n if capacity_n else None,
        "inflight_train": int(row["train_sum"]) / n,
        "inflight_eval": int(row["eval_sum"]) / n,
        "preemptions": preemptions,
        "generation_tokens": tokens,
        "prefix_cache_hits": hits,
        "prefix_cache_queries": queries,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds if seconds > 0 else None,
        "preemptions_per_s": preemptions / seconds if seconds > 0 else None,
        "prefix_hit_rate": hits / queries if queries else None,
        "staleness_max_s": row["staleness_max"],
        "not_up": int(row["not_up"]),
        "restarts": int(row["restarts"]),
    }
