"""Engine samples rolled up into 60 s, 10 min and 1 h bins (runs.rollups): the samples
endpoint gives the raw answer from rollups plus raw samples, compaction is idempotent and
never deletes what is not rolled up, a too-fine step over deleted samples is a clear 400,
and the sweep compacts within its budget."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from rest_framework.test import APIClient

from controlplane.runs import rollups
from controlplane.runs.models import EngineSample, RollupWatermark, Run, SampleRollup
from tests.api.conftest import T0, make_run
from tests.conftest import REPO_ROOT
from workers.runtime import sweep

pytestmark = pytest.mark.django_db

HOURS = 3
NOW = T0 + timedelta(hours=HOURS, seconds=25)  # the lag's cutoff, 02:50:25, cuts a bin


def _fill(run: Run) -> None:
    """Two engines polled every 7 s (so bins hold unequal counts), with every kind of value
    the aggregation treats apart: null capacities and intervals, stale polls, restarts."""
    rows = []
    for engine, offset in (("a", 0), ("b", 3)):
        for i in range(HOURS * 3600 // 7):
            restarted = i % 97 == 0
            rows.append(
                EngineSample(
                    run=run, at=T0 + timedelta(seconds=i * 7 + offset, microseconds=i % 1000),
                    engine_id=engine, role="unified", health="stale" if i % 11 == 0 else "up",
                    kv_usage=(i * 37 % 101) / 101, num_running=i % 50, num_waiting=i % 7,
                    num_waiting_capacity=None if i % 5 == 0 else i % 13,
                    num_preemptions=int(i % 17 == 0), prefix_cache_hits=i % 90,
                    prefix_cache_queries=100, generation_tokens=400 + i % 300,
                    restarted=restarted, interval_s=None if restarted else 7.0 + (i % 3) / 10,
                    staleness_s=(i % 13) * 0.5, inflight_train=i % 40, inflight_eval=i % 4,
                )
            )  # fmt: skip
    EngineSample.objects.bulk_create(rows)


QUERIES: list[dict[str, Any]] = [
    {"step_s": 60},
    {"step_s": 120},
    {"step_s": 600},
    {"step_s": 900},
    {"step_s": 3600},
    {"step_s": 7200},
    {},
    {"step_s": 600, "since": "2026-11-30T12:03:17Z", "until": "2026-11-30T14:55:41Z"},
    {"step_s": 3600, "since": "2026-11-30T12:03:17Z"},
    {"step_s": 60, "engine": "b", "since": "2026-11-30T13:59:59.5Z"},
    {"step_s": 5, "since": "2026-11-30T12:10:00Z", "until": "2026-11-30T12:20:00Z"},
]


def _answers(client: APIClient, run: Run) -> list[dict[str, Any]]:
    answers = []
    for query in QUERIES:
        response = client.get(f"/api/runs/{run.pk}/samples/", query)
        assert response.status_code == 200, (query, response.json())
        answers.append(response.json())
    return answers


def _assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    """Equal, but for float sums added in another order (a rounding error of 1e-12)."""
    assert got["step_s"] == want["step_s"]
    assert [(p["engine"], p["at"]) for p in got["points"]] == [
        (p["engine"], p["at"]) for p in want["points"]
    ]
    for mine, theirs in zip(got["points"], want["points"], strict=True):
        assert mine.keys() == theirs.keys()
        for name, value in theirs.items():
            if isinstance(value, float):
                assert mine[name] == pytest.approx(value, rel=1e-12), (name, mine, theirs)
            else:
                assert mine[name] == value, (name, mine, theirs)


def _rollups(run: Run) -> list[tuple]:
    return list(
        SampleRollup.objects.filter(run=run).order_by("tier_s", "engine_id", "start").values_list()
    )


def test_rollups_and_raw_samples_give_the_raw_answer_with_partial_bins(
    viewer_client: APIClient,
) -> None:
    run = make_run()
    _fill(run)
    raw = _answers(viewer_client, run)
    report = rollups.compact_run(run.pk, now=NOW)
    assert report.caught_up and report.deleted == 0
    assert report.until == {
        60: T0 + timedelta(hours=2, minutes=50),
        600: T0 + timedelta(hours=2, minutes=50),
        3600: T0 + timedelta(hours=2),
    }
    assert report.rows[60] == 2 * 170 and report.rows[600] == 2 * 17 and report.rows[3600] == 4
    for got, want in zip(_answers(viewer_client, run), raw, strict=True):
        _assert_same(got, want)

    before = _rollups(run)
    again = rollups.compact_run(run.pk, now=NOW)
    assert sum(again.rows.values()) == 0 and _rollups(run) == before
    # Every bin re-rolled from scratch (watermarks reset) writes the same rows.
    RollupWatermark.objects.filter(run=run).update(until=None)
    rollups.compact_run(run.pk, now=NOW)
    assert _rollups(run) == before


def test_a_bin_is_rolled_up_once_whole_and_the_rest_read_raw_as_time_goes_on(
    viewer_client: APIClient,
) -> None:
    run = make_run()
    _fill(run)
    raw = _answers(viewer_client, run)
    for minutes in (30, 61, 95, 170):  # sweeps along the run, the cutoff mid-bin each time
        rollups.compact_run(run.pk, now=T0 + timedelta(minutes=minutes + 10, seconds=33))
        for got, want in zip(_answers(viewer_client, run), raw, strict=True):
            _assert_same(got, want)


def test_retention_deletes_only_rolled_up_samples_and_a_fine_step_there_is_a_400(
    viewer_client: APIClient, settings: Any
) -> None:
    run = make_run()
    _fill(run)
    raw = {
        step: viewer_client.get(f"/api/runs/{run.pk}/samples/", {"step_s": step}).json()
        for step in (60, 600, 3600)
    }
    settings.PACER_SAMPLE_RETENTION_S = 1800.0
    settings.PACER_ROLLUP_CHUNK_S = 1200.0  # deletions in several chunks
    # Retention would keep raw samples from 14:30:25 only, but the 1 h tier is rolled up to
    # 14:00: what it does not hold yet stays.
    pruned = T0 + timedelta(hours=2)
    total = EngineSample.objects.filter(run=run).count()
    kept = EngineSample.objects.filter(run=run, at__gte=pruned).count()
    report = rollups.compact_run(run.pk, now=NOW)
    run.refresh_from_db()
    assert run.samples_pruned_before == pruned
    assert report.deleted == total - kept > 0
    assert EngineSample.objects.filter(run=run).count() == kept
    for step, want in raw.items():
        got = viewer_client.get(f"/api/runs/{run.pk}/samples/", {"step_s": step}).json()
        _assert_same(got, want)

    fine = viewer_client.get(f"/api/runs/{run.pk}/samples/", {"step_s": 5})
    assert fine.status_code == 400
    message = fine.json()["errors"]["step_s"][0]
    assert "raw samples before 2026-11-30T14:00:00+00:00 were deleted" in message
    assert "multiple of 60" in message
    odd = viewer_client.get(f"/api/runs/{run.pk}/samples/", {"step_s": 90})
    assert odd.status_code == 400
    recent = {"step_s": 5, "since": "2026-11-30T14:00:00Z"}
    assert viewer_client.get(f"/api/runs/{run.pk}/samples/", recent).status_code == 200
    # With no step asked, one that rollups answer is chosen: a minute, not the 15 s that 1,000
    # points over the last three hours would allow.
    short = {"since": "2026-11-30T12:00:00Z", "until": "2026-11-30T15:00:00Z"}
    assert viewer_client.get(f"/api/runs/{run.pk}/samples/", short).json()["step_s"] == 60.0


def test_nothing_newer_than_the_lag_is_rolled_up_or_deleted(settings: Any) -> None:
    run = make_run()
    _fill(run)
    settings.PACER_SAMPLE_RETENTION_S = 0.0
    settings.PACER_ROLLUP_LAG_S = 2 * 3600.0
    rollups.compact_run(run.pk, now=NOW)
    marks = dict(RollupWatermark.objects.filter(run=run).values_list("tier_s", "until"))
    assert marks == dict.fromkeys(rollups.TIERS_S, T0 + timedelta(hours=1))
    assert not SampleRollup.objects.filter(run=run, start__gte=T0 + timedelta(hours=1)).exists()
    first_raw = EngineSample.objects.filter(run=run).order_by("at").first()
    assert first_raw is not None and first_raw.at >= T0 + timedelta(hours=1)


@pytest.mark.django_db(transaction=True)
def test_a_run_another_worker_compacts_is_skipped_not_waited_for() -> None:
    run = make_run()
    _fill(run)
    rollups.compact_run(run.pk, now=T0 + timedelta(minutes=30))
    held, release = threading.Event(), threading.Event()

    def other_worker() -> None:
        with transaction.atomic():
            list(RollupWatermark.objects.select_for_update().filter(run=run, tier_s=60))
            held.set()
            release.wait(10)
        connection.close()

    thread = threading.Thread(target=other_worker)
    thread.start()
    try:
        assert held.wait(10)
        report = rollups.compact_run(run.pk, now=NOW)
        assert not report.caught_up and report.rows[60] == 0 and report.deleted == 0
    finally:
        release.set()
        thread.join()
    assert rollups.compact_run(run.pk, now=NOW).caught_up


def test_the_sweep_compacts_within_its_budget(settings: Any) -> None:
    run = make_run()
    _fill(run)
    settings.PACER_ROLLUP_SWEEP_BUDGET_S = 0.0
    assert sweep.compact_once() == []
    settings.PACER_ROLLUP_SWEEP_BUDGET_S = 30.0
    settings.PACER_ROLLUP_LAG_S = (datetime.now(T0.tzinfo) - T0).total_seconds() - 3600
    (report,) = sweep.compact_once()
    assert report.run_id == run.pk and report.caught_up
    assert report.until[60] == T0 + timedelta(hours=1)
    assert SampleRollup.objects.filter(run=run, tier_s=60).count() == 2 * 60


def test_compact_samples_reports_its_progress(settings: Any) -> None:
    run = make_run()
    _fill(run)
    settings.PACER_ROLLUP_CHUNK_S = 3600.0
    out = io.StringIO()
    call_command("compact_samples", stdout=out)
    text = out.getvalue()
    assert "compacting 1 run(s)" in text
    assert f"run {run.pk}, 60 s bins: 120 rows, to 2026-11-30T13:00:00+00:00" in text
    assert f"[1/1] run {run.pk}: rollup rows 60 s: 360" in text and "done in" in text


def test_compact_samples_on_sqlite_says_rollups_need_postgresql(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'pacer.sqlite3'}"}
    manage = [sys.executable, str(REPO_ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True)
    done = subprocess.run([*manage, "compact_samples"], env=env, capture_output=True, text=True)
    assert done.returncode == 1
    assert "sample rollups need PostgreSQL (this database is sqlite)" in done.stderr
    assert "Traceback" not in done.stderr
