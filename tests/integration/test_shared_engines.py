"""Two runs on the same engines, hosted by real Celery workers on real simulator processes:
the second run gets its share of the pool the first had filled (the first, which sizes the
pool, comes down to half of it as the second fills its half, at the first's level), each
change a share decision; the
worker hosting one is killed, and once its claim is stale the other holds the whole pool."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import Q
from django.utils import timezone

from controlplane.runs.engine_commands import share_set
from controlplane.runs.models import CLAIM_TTL_S, Decision, Override, Run, RunState
from controlplane.runs.queue import RUN_TASK, send_by_name
from controlplane.runs.services import override_create
from tests.integration.hosting import (
    SimEngine,
    kill_worker,
    run_document,
    sim_engines,
    start_worker,
    stop_worker,
    wait_for,
)
from workers.core.decisions import Cause
from workers.core.sharing import OVERDUE_GRACE_S

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
# The smaller cap over the larger, averaged over ten seconds: equal shares within 10 %.
FAIR = 0.9


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SimEngine]]:
    with sim_engines(tmp_path_factory.mktemp("sims"), 2) as started:
        yield started


def hosted(engines: list[SimEngine], name: str, queue: str) -> Run:
    """A run sent to ``queue``'s worker: each worker here hosts one run, and a worker busy
    with one would hold a second task it prefetched."""
    document = run_document(engines, name=name, max_steps=100_000)
    document["concurrency"]["initial_inflight"] = 32
    document["concurrency"]["max_inflight"] = 512
    run = Run.objects.create(name=name, config=document, state=RunState.QUEUED)
    send_by_name(RUN_TASK, [run.pk], what=f"run {run.pk}", again="nobody", queue=queue)
    return run


def cap_of(run: Run) -> int:
    return Run.objects.values_list("cap", flat=True).get(pk=run.pk) or 0


def decisions(run: Run, kind: str) -> list[Decision]:
    return list(Decision.objects.filter(run=run, kind=kind).order_by("at", "id"))


def shares(run: Run) -> list[Decision]:
    return decisions(run, "share")


def test_two_runs_split_the_pool_and_a_dead_hosts_share_comes_back(
    engines: list[SimEngine], queue: str, runs_dir: Path, tmp_path: Path
) -> None:
    first_worker = start_worker(tmp_path, "first", queue, runs_dir, concurrency=1)
    second_worker = None
    try:
        first = hosted(engines, "first", queue)
        wait_for(lambda: cap_of(first) >= 100, 120, "the first run to fill the pool")
        alone = cap_of(first)
        other_queue = f"{queue}-second"
        second_worker = start_worker(tmp_path, "second", other_queue, runs_dir, concurrency=1)
        second = hosted(engines, "second", other_queue)
        wait_for(lambda: shares(first), 60, "the first run's share")
        (joined, *_) = shares(first)
        assert f"with run {second.pk} x1 p0" in joined.reason
        assert "ceiling none ->" in joined.reason and "sized by this run" in joined.reason
        # it starts at its part (a bootstrap), or bootstraps alone first if it polls before
        # its first look, then takes its part (a share decision)
        pooled = wait_for(
            lambda: [
                d for d in decisions(second, "bootstrap") + shares(second) if "pool" in d.reason
            ],
            60,
            "the second run's part",
        )
        assert f"sized by run {first.pk}" in pooled[0].reason
        assert joined.figures["ceiling"] == joined.cap_after  # the run page's ceiling line
        # it holds what the second has not filled yet, and the two come to equal parts as the
        # second fills its own
        ratios = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            a, b = cap_of(first), cap_of(second)
            ratios.append(min(a, b) / max(a, b, 1))
            if len(ratios) >= 10 and statistics.mean(ratios[-10:]) >= FAIR:
                break
            time.sleep(1.0)
        print(f"\nalone {alone}; then caps {cap_of(first)} / {cap_of(second)}", end="")
        assert statistics.mean(ratios[-10:]) >= FAIR, ratios

        second.refresh_from_db()
        told = share_set(run=second, created_by=None, share=3.0, reason="more for the second")
        said = wait_for(lambda: Override.objects.get(pk=told.pk).decision, 15, "the new share")
        assert said.reason.startswith("share 1, priority 0 -> share 3, priority 0")
        wait_for(
            lambda: (s := shares(first)) and "with run" in s[-1].reason and "x3" in s[-1].reason,
            30,
            "the first run's ceiling to be cut for the second's new share",
        )

        held = cap_of(first) + cap_of(second)
        before_kill = Decision.objects.filter(run=first).order_by("id").last().pk
        kill_worker(second_worker)
        second_worker = None
        killed_at, killed_wall = time.monotonic(), timezone.now()
        lifted = wait_for(
            lambda: [d for d in shares(first) if "ceiling" in d.reason and "-> none" in d.reason],
            CLAIM_TTL_S + 30,
            "the first run's ceiling to go",
        )
        print(f"; ceiling lifted {time.monotonic() - killed_at:.1f} s after the kill", end="")
        assert "no other run shares its engines" in lifted[-1].reason
        assert "ceiling" not in lifted[-1].figures
        # The freed share is the first run's at once: from its part of the pool's level (a
        # quarter, at x1 beside x3) to the whole level. (Not the level the two held at the
        # kill: under load pacer probes a step over the pool's knee and trims back every few
        # seconds, so the level at the kill need not stand.)
        since_kill = f"the two held {held}; the first's decisions since the kill:\n" + "\n".join(
            f"{d.at:%H:%M:%S.%f} {d.kind} {d.cap_before} -> {d.cap_after}: {d.reason}"
            for d in Decision.objects.filter(run=first, id__gt=before_kill).order_by("id")
        )
        whole = lifted[-1]
        assert whole.cap_after >= 3 * whole.cap_before, since_kill
        # Once the dead run's claim is overdue (its host renewed it every 0.5 s), the first
        # neither grows the pool's level nor trims it on a throughput verdict until the claim
        # is gone (a KV trim or a cut still may).
        # (a few seconds more for the first host's next look, and a loaded machine's lag)
        overdue_by = killed_wall + timedelta(seconds=0.5 + OVERDUE_GRACE_S + 5.0)
        grown_or_judged = Q(kind="grow") | Q(kind="trim", cause=Cause.THROUGHPUT_FLAT.value)
        meanwhile = Decision.objects.filter(
            grown_or_judged, run=first, at__gt=overdue_by, at__lt=lifted[-1].at
        )
        assert not meanwhile.exists(), since_kill
        first.refresh_from_db()
        override_create(run=first, created_by=None, mode="stop", reason="done")
        wait_for(lambda: Run.objects.get(pk=first.pk).state in RunState.ended(), 60, "the stop")
    finally:
        stop_worker(first_worker)
        if second_worker is not None:
            stop_worker(second_worker)
