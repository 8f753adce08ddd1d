"""One run with a million decisions and ten million engine samples: how fast the list and
downsampled endpoints answer, before and after compaction into rollups.

    python -m bench.big_tables [--decisions 1000000] [--engines 16] [--days 36] [--repeats 30]

Fills a database of its own (made and dropped by bench.stack.throwaway_database) with one
run's decisions and samples (16 engines polled every 5 s for 36 days is 9.95M rows), made by
the database itself with generate_series. Times, through Django's test client with token auth as a
client sends it: the first page of decisions, a page 900,000 rows deep by its cursor, and
samples: one engine and all engines over the last 166 h (a week less 2 h: 1,000 points of
600 s) at 600 s and 3,600 s, and the last 16 h at 60 s (a day at 60 s is 1,441 points, more
than PACER_SAMPLES_MAX_POINTS). Samples are timed on raw rows first, then after
``compact_samples`` (retention off, so all ten million raw rows stay), then retention is
applied and timed. EXPLAIN shows each endpoint's queries use indexes.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from bench.override_latency import percentile
from bench.stack import throwaway_database

POLL_S = 5


def fill_decisions(run_id: int, count: int, start: datetime, seconds: float) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO runs_decision (run_id, at, step, kind, cause, signal, cap_before,
                cap_after, reason, shed, alert, applied, figures)
            SELECT %s, %s + make_interval(secs => i * %s), i / 20,
                CASE WHEN i %% 50 = 0 THEN 'cut' ELSE 'grow' END, 'clear', 'clear',
                100 + i %% 200, 101 + i %% 200, 'Increased concurrency (clear)', 0, false, true,
                '{"kv_usage": 0.5}'::jsonb
            FROM generate_series(0, %s - 1) AS i
            """,
            [run_id, start, seconds / count, count],
        )


def fill_samples(run_id: int, engine: int, start: datetime, seconds: int) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO runs_enginesample (
                run_id, at, engine_id, role, health, kv_capacity_tokens, max_model_len,
                kv_usage, num_running, num_waiting, num_waiting_capacity, num_preemptions,
                prefix_cache_hits, prefix_cache_queries, generation_tokens, restarted,
                interval_s, staleness_s, inflight_train, inflight_eval)
            SELECT %s, %s + make_interval(secs => t), 'engine-' || %s, 'unified',
                CASE WHEN t %% 997 = 0 THEN 'stale' ELSE 'up' END, 1000000, 4096,
                (t %% 1000) / 1000.0, 100 + t %% 50, t %% 3, 0, (t %% 97 = 0)::int,
                800, 1000, 5000 + t %% 500, false, %s, 0.05, 90 + t %% 20, t %% 4
            FROM generate_series(0, %s - 1, %s) AS t
            """,
            [run_id, start, f"{engine:02d}", float(POLL_S), seconds, POLL_S],
        )
        return cursor.rowcount


def timed(call: Callable[[], Any], repeats: int) -> tuple[list[float], Any]:
    times, result = [], None
    for _ in range(repeats):
        began = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - began)
    return times, result


def figures(times: list[float]) -> str:
    median, p99 = statistics.median(times) * 1000, percentile(times, 0.99) * 1000
    return f"median {median:.1f} ms, p99 {p99:.1f} ms over {len(times)}"


def explain(sql: str) -> str:
    """The plan's scan lines: which index (or none) each table is read by."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        lines = [row[0].strip() for row in cursor.fetchall()]
    scans = [line.lstrip("-> ") for line in lines if "Scan" in line]
    return "; ".join(scans) or lines[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=1_000_000)
    parser.add_argument("--engines", type=int, default=16)
    parser.add_argument("--days", type=int, default=36)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--raw-repeats", type=int, default=3)
    args = parser.parse_args()
    base = os.environ.get("DATABASE_URL", "postgres://postgres:postgres@127.0.0.1:5432/postgres")
    with throwaway_database(base) as url:
        os.environ["DATABASE_URL"] = url
        run_bench(args)


def run_bench(args: argparse.Namespace) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from controlplane.runs import rollups
    from controlplane.runs.models import Decision, EngineSample, Run

    call_command("migrate", "--no-input", verbosity=0)
    call_command("pacer_user", "bench", "--role", "viewer", stdout=io.StringIO())
    run = Run.objects.create(name="big", config={}, state="running")
    seconds = args.days * 86400
    now = timezone.now().replace(microsecond=0)
    start = now - timedelta(seconds=seconds)

    began = time.perf_counter()
    fill_decisions(run.pk, args.decisions, start, seconds)
    print(f"{args.decisions:,} decisions made in {time.perf_counter() - began:.1f} s")
    began, rows = time.perf_counter(), 0
    for engine in range(args.engines):
        rows += fill_samples(run.pk, engine, start, seconds)
    print(
        f"{rows:,} samples ({args.engines} engines, {args.days} days of {POLL_S} s polls) "
        f"made in {time.perf_counter() - began:.1f} s"
    )
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE runs_decision")
        cursor.execute("VACUUM ANALYZE runs_enginesample")
    print(f"VACUUM ANALYZE in {time.perf_counter() - began:.1f} s")

    client = APIClient(SERVER_NAME="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get().key}")

    def get(path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        response = client.get(path, params or {})
        assert response.status_code == 200, response.content[:500]
        return response.json()

    def show_plans(label: str, call: Callable[[], Any]) -> None:
        with CaptureQueriesContext(connection) as captured:
            call()
        for query in captured.captured_queries:
            sql = query["sql"]
            if "runs_decision" in sql or "runs_enginesample" in sql or "runs_samplerollup" in sql:
                print(f"  plan ({label}): {explain(sql)}")

    decisions = f"/api/runs/{run.pk}/decisions/"
    deep = Decision.objects.filter(run=run).order_by("at", "id").values_list("at", flat=True)
    deep_at = deep[min(900_000, args.decisions - 200)]
    deep_next = get(decisions, {"since": deep_at.isoformat()})["next"]
    for label, call in (
        ("decisions, first page of 100", lambda: get(decisions)),
        ("decisions, a page 900,000 rows deep by cursor", lambda: get(deep_next)),
        ("decisions of kind cut, first page", lambda: get(decisions, {"kind": "cut"})),
    ):
        times, body = timed(call, args.repeats)
        print(f"{label}: {len(body['results'])} rows, {figures(times)}")
        show_plans(label, call)

    samples = f"/api/runs/{run.pk}/samples/"
    week = (now - timedelta(hours=166)).isoformat()
    hours16 = (now - timedelta(hours=16)).isoformat()
    queries = (
        ("one engine, 166 h at 600 s", {"engine": "engine-00", "since": week, "step_s": 600}),
        ("all engines, 166 h at 600 s", {"since": week, "step_s": 600}),
        ("all engines, 166 h at 3600 s", {"since": week, "step_s": 3600}),
        ("one engine, 16 h at 60 s", {"engine": "engine-00", "since": hours16, "step_s": 60}),
        ("all engines, 16 h at 60 s", {"since": hours16, "step_s": 60}),
    )

    def time_samples(stage: str, repeats: int, plans: bool) -> dict[str, Any]:
        answers = {}
        for label, params in queries:
            times, body = timed(lambda p=params: get(samples, p), repeats)
            answers[label] = body
            print(f"[{stage}] samples, {label}: {len(body['points'])} points, {figures(times)}")
            if plans:
                show_plans(label, lambda p=params: get(samples, p))
        return answers

    raw = time_samples("raw only", args.raw_repeats, plans=False)
    day = {"step_s": 60, "since": (now - timedelta(days=1)).isoformat()}
    print(f"a day at 60 s (1,441 points per engine): {client.get(samples, day).status_code}")

    settings.PACER_SAMPLE_RETENTION_S = 10 * seconds  # all raw rows stay for the timings
    began = time.perf_counter()
    report = rollups.compact_run(run.pk)
    print(
        f"compaction: rollup rows {report.rows}, {time.perf_counter() - began:.1f} s "
        f"(watermarks {', '.join(f'{t} s: {u:%m-%d %H:%M}' for t, u in report.until.items())})"
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_samplerollup")
    rolled = time_samples("rollups + raw", args.repeats, plans=True)
    for label, body in rolled.items():
        same = [
            (p["engine"], p["at"], p["samples"], p["generation_tokens"]) for p in body["points"]
        ]
        want = [
            (p["engine"], p["at"], p["samples"], p["generation_tokens"])
            for p in raw[label]["points"]
        ]
        assert same == want, f"{label}: rollups and raw samples disagree"
    print("every answer from rollups has the raw answer's points, counts and token sums")

    settings.PACER_SAMPLE_RETENTION_S = 7 * 86400.0
    began = time.perf_counter()
    report = rollups.compact_run(run.pk)
    left = EngineSample.objects.filter(run=run).count()
    print(
        f"retention (7 days): {report.deleted:,} raw samples deleted in "
        f"{time.perf_counter() - began:.1f} s; {left:,} left"
    )
    time_samples("after retention", args.repeats, plans=False)
    old = {
        "step_s": 5,
        "since": start.isoformat(),
        "until": (start + timedelta(hours=1)).isoformat(),
    }
    refused = client.get(samples, old)
    print(f"step 5 s over deleted samples: {refused.status_code} {refused.json()['errors']}")
    connection.close()


if __name__ == "__main__":
    main()
