"""/metrics: the control plane's own figures, in Prometheus text.

Everything is read from the database at scrape time by one custom collector, not counted in
this process: the runs' live figures are what their workers store on the Run rows, decisions
are counted by a grouped query, engine health is what the last poll of any run stored. So any
web process answers the same, however many web and worker processes there are, and a web
process restarting loses nothing.

Series (labels): ``pacer_runs`` (state); ``pacer_run_cap``, ``pacer_run_policy_cap``,
``pacer_run_step``, ``pacer_run_generation_tokens_per_second``, ``pacer_run_inflight`` (run,
kind) and ``pacer_run_overrides_pending`` for active runs; ``pacer_decisions_total`` (run, kind,
cause) for active runs and those ended within ``PACER_METRICS_ENDED_RUNS_S``;
``pacer_engine_up``, ``pacer_engine_stale``, ``pacer_engine_last_seen_age_seconds`` (engine);
``pacer_engine_staleness_seconds`` (run, engine): the age of an engine's numbers at its run's
latest poll; ``pacer_control_latency_seconds`` (mode): a histogram of the time from an
operator's command being stored to the run acting on it (for cap commands: to their decision
being stored); ``pacer_metrics_collect_seconds``: how long this scrape's queries took.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from controlplane.runs.models import Decision, Engine, EngineSample, Override, Run, RunState
from controlplane.runs.selectors import ACTIVE

# Seconds from a command stored to the run acting on it: the goal is well under a second.
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# An engine's latest sample is looked for among this many seconds of its run's samples.
LATEST_SAMPLE_WINDOW_S = 300.0


class PacerCollector:
    def describe(self) -> list[Metric]:
        return []  # nothing at registration: collecting reads the database

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        yield from _runs()
        yield from _decisions()
        yield from _engines()
        yield _latency()
        took = GaugeMetricFamily("pacer_metrics_collect_seconds", "Time this scrape's queries took")
        took.add_metric([], time.perf_counter() - started)
        yield took


def _runs() -> Iterator[Metric]:
    by_state = GaugeMetricFamily("pacer_runs", "Runs by state", labels=["state"])
    counts = dict(Run.objects.values_list("state").annotate(n=Count("id")).order_by())
    for state in RunState.values:
        by_state.add_metric([state], counts.get(state, 0))
    yield by_state
    cap = GaugeMetricFamily("pacer_run_cap", "The in-flight cap in force", labels=["run"])
    policy = GaugeMetricFamily(
        "pacer_run_policy_cap", "The policy's own cap (differs while pinned)", labels=["run"]
    )
    inflight = GaugeMetricFamily("pacer_run_inflight", "Episodes in flight", labels=["run", "kind"])
    step = GaugeMetricFamily("pacer_run_step", "The last step written", labels=["run"])
    tokens = GaugeMetricFamily(
        "pacer_run_generation_tokens_per_second", "Tokens generated per second", labels=["run"]
    )
    pending = GaugeMetricFamily(
        "pacer_run_overrides_pending", "Operator commands not acted on yet", labels=["run"]
    )
    waiting = dict(
        Override.objects.filter(applied_at__isnull=True, error="", run__state__in=ACTIVE)
        .values_list("run_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    fields = ("id", "cap", "policy_cap", "inflight_train", "inflight_eval", "step")
    for row in Run.objects.filter(state__in=ACTIVE).values(*fields, "generation_tokens_per_s"):
        run = str(row["id"])
        if row["cap"] is not None:
            cap.add_metric([run], row["cap"])
        if row["policy_cap"] is not None:
            policy.add_metric([run], row["policy_cap"])
        inflight.add_metric([run, "train"], row["inflight_train"])
        inflight.add_metric([run, "eval"], row["inflight_eval"])
        step.add_metric([run], row["step"])
        tokens.add_metric([run], row["generation_tokens_per_s"])
        pending.add_metric([run], waiting.get(row["id"], 0))
    yield from (cap, policy, inflight, step, tokens, pending)


def _decisions() -> Iterator[Metric]:
    family = CounterMetricFamily(
        "pacer_decisions", "Decisions made", labels=["run", "kind", "cause"]
    )
    recent = timezone.now() - timedelta(seconds=settings.PACER_METRICS_ENDED_RUNS_S)
    shown = Run.objects.filter(Q(state__in=ACTIVE) | Q(finished_at__gte=recent)).values("id")
    rows = (
        Decision.objects.filter(run_id__in=shown)
        .values_list("run_id", "kind", "cause")
        .annotate(n=Count("id"))
        .order_by()
    )
    for run_id, kind, cause, n in rows:
        family.add_metric([str(run_id), kind, cause], n)
    yield family


def _engines() -> Iterator[Metric]:
    up = GaugeMetricFamily(
        "pacer_engine_up",
        "1 when the last poll of any run found it up and recent",
        labels=["engine"],
    )
    stale = GaugeMetricFamily(
        "pacer_engine_stale",
        "1 when no run has polled it within PACER_ENGINE_STALE_S, or its numbers were old",
        labels=["engine"],
    )
    age = GaugeMetricFamily(
        "pacer_engine_last_seen_age_seconds",
        "Seconds since a run last polled it",
        labels=["engine"],
    )
    now = timezone.now()
    limit = settings.PACER_ENGINE_STALE_S
    for engine in Engine.objects.only("name", "last_health", "last_seen_at"):
        health = engine.last_health.get("health") if isinstance(engine.last_health, dict) else None
        seen = None if engine.last_seen_at is None else (now - engine.last_seen_at).total_seconds()
        recent = seen is not None and seen <= limit
        up.add_metric([engine.name], 1.0 if recent and health == "up" else 0.0)
        stale.add_metric([engine.name], 0.0 if recent and health != "stale" else 1.0)
        if seen is not None:
            age.add_metric([engine.name], seen)
    yield from (up, stale, age)
    staleness = GaugeMetricFamily(
        "pacer_engine_staleness_seconds",
        "Age of an engine's numbers at its run's latest poll",
        labels=["run", "engine"],
    )
    since = now - timedelta(seconds=LATEST_SAMPLE_WINDOW_S)
    latest: dict[tuple[int, str], float] = {}
    rows = (
        EngineSample.objects.filter(run__state__in=(RunState.RUNNING, RunState.STOPPING))
        .filter(at__gte=since)
        .order_by("at", "id")
        .values_list("run_id", "engine_id", "staleness_s")
    )
    for run_id, engine_id, seconds in rows.iterator(chunk_size=5000):
        latest[(run_id, engine_id)] = seconds
    for (run_id, engine_id), seconds in sorted(latest.items()):
        staleness.add_metric([str(run_id), engine_id], seconds)
    yield staleness


def _latency() -> Metric:
    family = HistogramMetricFamily(
        "pacer_control_latency_seconds",
        "From an operator's command stored to the run acting on it",
        labels=["mode"],
    )
    took = ExpressionWrapper(F("applied_at") - F("created_at"), output_field=DurationField())
    buckets = {
        f"le_{i}": Count("id", filter=Q(took__lte=timedelta(seconds=bound)))
        for i, bound in enumerate(LATENCY_BUCKETS_S)
    }
    rows = (
        Override.objects.filter(applied_at__isnull=False)
        .annotate(took=took)
        .values("mode")
        .annotate(total=Count("id"), seconds=Sum("took"), **buckets)
        .order_by("mode")
    )
    for row in rows:
        counts = [(repr(b), row[f"le_{i}"]) for i, b in enumerate(LATENCY_BUCKETS_S)]
        counts.append(("+Inf", row["total"]))
        total = row["seconds"].total_seconds() if row["seconds"] is not None else 0.0
        family.add_metric([row["mode"]], counts, sum_value=total)
    return family


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(PacerCollector())  # type: ignore[arg-type]


def metrics_view(request: HttpRequest) -> HttpResponse:
    expected = settings.PACER_METRICS_TOKEN
    if expected:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {expected}".encode()):
            response = HttpResponse("a bearer token is needed\n", status=401)
            response["WWW-Authenticate"] = "Bearer"
            return response
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
