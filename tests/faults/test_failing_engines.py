"""Engines that fail every completion under a hosted run, for real: a proxy in front of a
simulator answers HTTP 500 to every completion while its /metrics, /tokenize and /v1/models
pass, so polls find the engine up and only its episodes say it is broken."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from controlplane.runs.models import Decision, Run, RunState, StepRecord
from controlplane.runs.services import enqueue, override_create
from tests.faults.conftest import proxy
from tests.integration.hosting import run_document, sim_engines, start_worker, stop_worker, wait_for
from workers.core.dispatch.breaker import BreakerConfig

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

DEFAULTS = BreakerConfig()


def steps(run: Run) -> int:
    return StepRecord.objects.filter(run=run).count()


def engines_of_step(run_dir: Path, step: int) -> set[str]:
    lines = (run_dir / "steps" / f"{step:06d}" / "samples.jsonl").read_text().splitlines()
    return {json.loads(line)["engine"] for line in lines}


def decision(run: Run, kind: str) -> Decision | None:
    return Decision.objects.filter(run=run, kind=kind).order_by("at").first()


def test_an_engine_answering_500_goes_out_of_routing_the_run_goes_on_and_it_comes_back(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    """The breaker's defaults (5 failures, a first probe after 5 s): the failing engine is
    listed first, as the fewest in flight it would take every group."""
    with sim_engines(tmp_path, 2) as engines, proxy("errors", engines[0].url, tmp_path) as bad:
        bad.break_()
        failing = f"127.0.0.1:{bad.port}"
        good = engines[1].url.removeprefix("http://")
        document = run_document(engines, max_steps=10_000)
        document["engine"] = [{"url": f"http://{failing}"}, {"url": engines[1].url}]
        run = Run.objects.create(name="engine-500", config=document, state=RunState.QUEUED)
        worker = start_worker(tmp_path, "w", queue, runs_dir)
        try:
            started = time.monotonic()
            enqueue(run.pk)
            wait_for(lambda: steps(run) >= 3, 60, "three steps beside the failing engine")
            to_steps = time.monotonic() - started
            out = decision(run, "engine-out")
            assert out is not None
            run_dir = runs_dir / str(run.pk)
            broken_steps = steps(run)
            assert all(engines_of_step(run_dir, s) == {good} for s in range(1, broken_steps + 1))
            bad.mend()
            mended = time.monotonic()
            back = wait_for(
                lambda: Decision.objects.filter(run=run, kind="engine-back").first(),
                DEFAULTS.backoff_max_s + 10,
                "the engine back once it answers",
            )
            to_back = time.monotonic() - mended
            wait_for(
                lambda: any(
                    failing in engines_of_step(run_dir, s) for s in range(1, steps(run) + 1)
                ),
                60,
                "a step with episodes from the engine that came back",
            )
            run.refresh_from_db()
            override_create(run=run, created_by=None, mode="stop", reason="test over")
            wait_for(lambda: Run.objects.get(pk=run.pk).state in RunState.ended(), 60, "the stop")
        finally:
            stop_worker(worker)
    assert out.alert and failing in out.reason and "HTTP 500" in out.reason, out.reason
    assert not back.alert and failing in back.reason
    outs = Decision.objects.filter(run=run, kind="engine-out").count()
    print(
        f"\nan engine answering 500: out of routing after {out.figures['failures']:g} failed "
        f"episodes ({out.reason}); {broken_steps} steps in {to_steps:.1f} s from the start, "
        f"every episode from {good}; {outs} engine-out decisions (failed probes included); "
        f"back {to_back:.1f} s after it answered again ({back.reason})"
    )


def test_a_run_whose_every_engine_fails_ends_failed_with_the_reason_after_give_up_s(
    tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    give_up_s = 6.0
    with sim_engines(tmp_path, 1) as engines, proxy("errors", engines[0].url, tmp_path) as bad:
        bad.break_()
        document = run_document(engines, max_steps=10_000)
        document["engine"] = [{"url": f"http://127.0.0.1:{bad.port}"}]
        document["concurrency"]["breaker"] = {"backoff_s": 1.0, "give_up_s": give_up_s}
        run = Run.objects.create(name="engines-500", config=document, state=RunState.QUEUED)
        worker = start_worker(tmp_path, "w", queue, runs_dir)
        try:
            enqueue(run.pk)
            out = wait_for(lambda: decision(run, "engine-out"), 60, "the engine-out decision")
            ended = wait_for(
                lambda: Run.objects.filter(pk=run.pk, state__in=RunState.ended()).first(),
                give_up_s + 30,
                "the run to fail",
            )
        finally:
            stop_worker(worker)
    assert ended.state == RunState.FAILED, (ended.state, ended.error)
    assert "no engine has been usable" in ended.error and "HTTP 500" in ended.error, ended.error
    assert steps(run) == 0
    after = (ended.finished_at - out.at).total_seconds()
    poll = document["concurrency"]["poll_interval_s"]
    assert give_up_s <= after <= give_up_s + poll + 5.0, after
    print(
        f"\nevery engine answering 500: engine-out, then the run failed {after:.1f} s later "
        f"(give_up_s {give_up_s:g}): {ended.error}"
    )
