"""Reading engine samples downsampled by the database, on PostgreSQL (production, tests) and
SQLite (the quick start).

``EpochBin(at, step)`` is ``floor(epoch seconds of at / step)``: samples with the same value
share a bin, which starts at ``value * step`` seconds after the epoch. Grouping by it lets the
database reduce a week of polls to a page of points in one indexed scan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db.models import Avg, BigIntegerField, Count, F, Func, Max, Min, Q, QuerySet, Sum

from controlplane.runs.models import EngineSample, Run

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
            raise NotImplementedError(f"EpochBin has no SQL for {connection.vendor}")
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
    samples cover. One grouped query; the
    step defaults to the smallest nice one giving at most PACER_SAMPLES_MAX_POINTS bins."""
    samples = EngineSample.objects.filter(run=run)
    if engines:
        samples = samples.filter(engine_id__in=engines)
    if since is not None:
        samples = samples.filter(at__gte=since)
    if until is not None:
        samples = samples.filter(at__lt=until)
    span = _span_s(samples, since, until)
    step = _step(span, step_s)
    rows = (
        samples.annotate(bin=EpochBin("at", step))
        .values("engine_id", "bin")
        .annotate(
            n=Count("id"),
            kv_mean=Avg("kv_usage"),
            kv_max=Max("kv_usage"),
            running_mean=Avg("num_running"),
            waiting_mean=Avg("num_waiting"),
            waiting_capacity_mean=Avg("num_waiting_capacity"),
            inflight_train_mean=Avg("inflight_train"),
            inflight_eval_mean=Avg("inflight_eval"),
            preemptions_sum=Sum("num_preemptions"),
            tokens_sum=Sum("generation_tokens"),
            hits_sum=Sum("prefix_cache_hits"),
            queries_sum=Sum("prefix_cache_queries"),
            seconds_sum=Sum("interval_s"),
            staleness_max=Max("staleness_s"),
            not_up=Count("id", filter=~Q(health="up")),
            restarts=Count("id", filter=Q(restarted=True)),
        )
        .order_by("engine_id", "bin")
    )
    return SampleSeries(step, since, until, [_point(row, step) for row in rows])


def _span_s(
    samples: QuerySet[EngineSample], since: datetime | None, until: datetime | None
) -> float:
    if since is not None and until is not None:
        return max(0.0, (until - since).total_seconds())
    found = samples.aggregate(first=Min("at"), last=Max("at"))
    first = since or found["first"]
    last = until or found["last"]
    if first is None or last is None:
        return 0.0
    return max(0.0, (last - first).total_seconds())


def _step(span_s: float, asked: float | None) -> float:
    most = settings.PACER_SAMPLES_MAX_POINTS
    least = span_s / most
    if asked is not None:
        points = math.floor(span_s / asked) + 1
        if points > most:
            raise TooManyPoints(points, math.ceil(least))
        return asked
    for nice in NICE_STEPS_S:
        if nice >= least:
            return float(nice)
    return float(math.ceil(least / 86400) * 86400)


def _point(row: dict[str, Any], step: float) -> dict[str, Any]:
    seconds = row["seconds_sum"] or 0.0
    tokens, preemptions = int(row["tokens_sum"] or 0), int(row["preemptions_sum"] or 0)
    hits, queries = int(row["hits_sum"] or 0), int(row["queries_sum"] or 0)
    return {
        "engine": row["engine_id"],
        "at": datetime.fromtimestamp(int(row["bin"]) * step, UTC),
        "samples": row["n"],
        "kv_usage": row["kv_mean"],
        "kv_usage_max": row["kv_max"],
        "num_running": row["running_mean"],
        "num_waiting": row["waiting_mean"],
        "num_waiting_capacity": row["waiting_capacity_mean"],
        "inflight_train": row["inflight_train_mean"],
        "inflight_eval": row["inflight_eval_mean"],
        "preemptions": preemptions,
        "generation_tokens": tokens,
        "prefix_cache_hits": hits,
        "prefix_cache_queries": queries,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds if seconds > 0 else None,
        "preemptions_per_s": preemptions / seconds if seconds > 0 else None,
        "prefix_hit_rate": hits / queries if queries else None,
        "staleness_max_s": row["staleness_max"],
        "not_up": row["not_up"],
        "restarts": row["restarts"],
    }
