"""A run from the terminal to the engines and back: created by ``pacer`` through the real web
server, hosted by a real Celery worker on simulated engines, its decisions followed live over
its websocket, its cap pinned and released, paused, resumed and stopped."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from controlplane.runs.models import Run, RunState
from tests.api.conftest import LiveServer, config_toml, make_account
from tests.conftest import REPO_ROOT, stop_process_group
from tests.integration.hosting import (
    DbWorker,
    SimEngine,
    sim_engines,
    start_worker,
    stop_worker,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SimEngine]]:
    with sim_engines(tmp_path_factory.mktemp("e2e-sims"), 2) as started:
        yield started


@pytest.fixture
def worker(module_queue: str, tmp_path: Path, live_server_api: LiveServer) -> Iterator[DbWorker]:
    started = start_worker(tmp_path, "e2e", module_queue, tmp_path / "runs")
    yield started
    stop_worker(started)


def pacer(server: LiveServer, token: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PACER_URL": server.url, "PACER_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "pacer_cli", *argv],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_create_follow_pin_release_pause_resume_and_stop_from_the_terminal(
    live_server_api: LiveServer, engines: list[SimEngine], worker: DbWorker, tmp_path: Path
) -> None:
    token = make_account("olga", "operator").token
    config = tmp_path / "run.toml"
    text = config_toml(engines[0].url, name="e2e", max_steps=100_000)
    config.write_text(text + f'\n[[engine]]\nurl = "{engines[1].url}"\n')
    created = pacer(live_server_api, token, "runs", "create", str(config))
    assert created.returncode == 0, created.stderr
    run_id = int(created.stdout.split()[1])
    api = httpx.Client(
        base_url=f"{live_server_api.url}/api/runs/{run_id}/",
        headers={"Authorization": f"Token {token}"},
    )

    def decisions(kind: str) -> list[dict]:
        return api.get("decisions/", params={"kind": kind}).json()["results"]

    wait_for(lambda: decisions("bootstrap"), 90, "the worker to start the run")
    follow_log = tmp_path / "follow.log"
    with follow_log.open("w") as log:
        follower = subprocess.Popen(
            [sys.executable, "-m", "pacer_cli", "runs", "decisions", str(run_id), "--follow"],
            cwd=REPO_ROOT,
            env={**os.environ, "PACER_URL": live_server_api.url, "PACER_TOKEN": token},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: follow_log.read_text(), 30, "the stored decisions to be printed")
        pinned = pacer(
            live_server_api, token, "runs", "override", str(run_id),
            "--pin", "24", "--ttl", "10m", "--reason", "e2e pin",
        )  # fmt: skip
        assert pinned.returncode == 0, pinned.stderr
        assert " (pin 24) applied: " in pinned.stdout and pinned.stdout.strip().endswith("e2e pin")
        (pin,) = decisions("pin")
        assert (pin["cap_after"], pin["override"]) == (24, int(pinned.stdout.split()[1]))
        overrides = api.get("overrides/").json()["results"]
        assert overrides[-1]["status"] == "applied" and overrides[-1]["decision_id"] == pin["id"]
        assert overrides[-1]["created_by"] == "olga"
        wait_for(lambda: api.get("").json()["cap"] == 24, 10, "the run's live cap")

        released = pacer(live_server_api, token, "runs", "override", str(run_id), "--release")
        assert released.returncode == 0 and " (release) applied: " in released.stdout
        (release,) = decisions("release")

        # Pause and resume wait for the run as an override does: the host stores its state
        # and lets the run go; a resumed run is hosted again from that state.
        paused = pacer(live_server_api, token, "runs", "pause", str(run_id), "--reason", "lunch")
        assert paused.returncode == 0 and " (pause) applied" in paused.stdout, paused.stdout
        assert Run.objects.get(pk=run_id).state == RunState.PAUSED
        resumed = pacer(live_server_api, token, "runs", "resume", str(run_id))
        assert resumed.returncode == 0 and " (resume) applied" in resumed.stdout, resumed.stdout
        wait_for(lambda: decisions("restore"), 60, "the resumed run to be hosted again")

        stopped = pacer(live_server_api, token, "runs", "stop", str(run_id), "--reason", "done")
        assert stopped.returncode == 0 and " (stop) applied" in stopped.stdout, stopped.stdout
        assert follower.wait(timeout=60) == 0
    finally:
        if follower.poll() is None:
            stop_process_group(follower)
    assert Run.objects.get(pk=run_id).state == RunState.CANCELLED
    lines = follow_log.read_text().splitlines()
    assert lines[-1] == f"run {run_id} cancelled"
    reasons = [line.split(" ", 2)[2] for line in lines[:-1]]
    stored = [
        d["reason"] for d in api.get("decisions/", params={"page_size": 1000}).json()["results"]
    ]
    assert reasons == stored  # every decision once, in order: the stored ones, then live
    assert pin["reason"] in reasons and release["reason"] in reasons
    assert pin["reason"].endswith("e2e pin")
