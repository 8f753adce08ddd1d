"""A week of 5 s polls of several engines, downsampled by the API in one answer.

    python -m bench.samples_downsample [--engines 4] [--days 7] [--repeats 5]

Fills a throwaway PostgreSQL database (bench.stack) with one run's engine samples, one per
engine every 5 s (120,960 per engine a week; the rows are made by the database itself with
generate_series, which takes seconds), then times ``GET /api/runs/{id}/samples/`` through
Django's test client, as a chart asks for it: the whole run at the default step (the least
nice one giving at most PACER_SAMPLES_MAX_POINTS points per engine), and the last day at 120 s.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from datetime import timedelta

from bench.stack import throwaway_database

POLL_S = 5


def fill(run_id: int, engines: int, days: int) -> int:
    from django.db import connection

    seconds = days * 86400
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO runs_enginesample (
                run_id, at, engine_id, role, health, kv_capacity_tokens, max_model_len,
                kv_usage, num_running, num_waiting, num_waiting_capacity, num_preemptions,
                prefix_cache_hits, prefix_cache_queries, generation_tokens, restarted,
                interval_s, staleness_s)
            SELECT %s, now() - make_interval(secs => %s) + make_interval(secs => t),
                'engine-' || e, 'unified', 'up', 1000000, 4096,
                (t %% 1000) / 1000.0, 100 + t %% 50, t %% 3, 0, (t %% 97 = 0)::int,
                800, 1000, 5000 + t %% 500, false, %s, 0.05
            FROM generate_series(0, %s - 1, %s) AS t, generate_series(0, %s - 1) AS e
            """,
            [run_id, seconds, POLL_S, seconds, POLL_S, engines],
        )
        return cursor.rowcount


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", type=int, default=4)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    base = os.environ.get("DATABASE_URL", "postgres://postgres:postgres@127.0.0.1:5432/postgres")
    with throwaway_database(base) as database:
        os.environ["DATABASE_URL"] = database
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection
        from rest_framework.authtoken.models import Token
        from rest_framework.test import APIClient

        from controlplane.runs.models import Run

        call_command("migrate", "--no-input", verbosity=0)
        call_command("pacer_user", "bench", "--role", "viewer", stdout=io.StringIO())
        run = Run.objects.create(name="week", config={}, state="completed")
        started = time.perf_counter()
        rows = fill(run.pk, args.engines, args.days)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE runs_enginesample")
        print(
            f"{rows:,} samples ({args.engines} engines, {args.days} days of 5 s polls) "
            f"made in {time.perf_counter() - started:.1f} s"
        )
        client = APIClient(SERVER_NAME="localhost")
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get().key}")
        day_ago = run.created_at - timedelta(days=1)
        last_day = {"since": day_ago.isoformat(), "step_s": 120}
        for label, params in (("whole run, default step", {}), ("last day, 120 s", last_day)):
            times, body = [], {}
            for _ in range(args.repeats):
                began = time.perf_counter()
                response = client.get(f"/api/runs/{run.pk}/samples/", params)
                times.append(time.perf_counter() - began)
                assert response.status_code == 200, response.content[:500]
                body = response.json()
            print(
                f"{label}: {len(body['points'])} points (step {body['step_s']:g} s), "
                f"median {statistics.median(times) * 1000:.0f} ms, "
                f"max {max(times) * 1000:.0f} ms over {args.repeats}"
            )
        connection.close()


if __name__ == "__main__":
    main()
