"""Real parts for the tests of hosted runs: simulated engines as their own processes, Celery
workers on the test database and a queue of their own, and waiting on what they write."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from django.db import connection

from controlplane.runs.models import Decision, Run, RunState
from tests.conftest import REPO_ROOT, VENV_BIN, free_port, stop_process_group

T = TypeVar("T")
STARTUP_S = 60.0


@dataclass(frozen=True)
class SimEngine:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path


@dataclass(frozen=True)
class DbWorker:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def sim_engines(
    folder: Path, count: int, *flags: str, env: dict[str, str] | None = None
) -> Iterator[list[SimEngine]]:
    """``count`` simulator processes on free ports, healthy on entry, gone on exit (the list
    may change meanwhile: a test replaces a killed engine by ``start_sim`` on its port);
    ``env`` adds to their environment (``VLLM_SERVER_DEV_MODE``)."""
    started: list[SimEngine] = []
    try:
        for index in range(count):
            log = folder / f"sim-{index}.log"
            started.append(start_sim(log, free_port(), index + 1, *flags, env=env))
        for engine in started:
            wait_healthy(engine)
        yield started
    finally:
        for engine in started:
            stop_process_group(engine.process)


def start_sim(
    log_path: Path, port: int, seed: int, *flags: str, env: dict[str, str] | None = None
) -> SimEngine:
    """One simulator process on ``port``; ``wait_healthy`` it before use."""
    command = [str(VENV_BIN / "python"), "-m", "inference.sim", "--port", str(port)]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [*command, "--seed", str(seed), *flags],
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return SimEngine(f"http://127.0.0.1:{port}", process, log_path)


def wait_healthy(engine: SimEngine) -> None:
    wait_for(lambda: _healthy(engine), STARTUP_S, f"simulator {engine.url}")


def _healthy(engine: SimEngine) -> bool:
    assert engine.process.poll() is None, engine.log_path.read_text()[-2000:]
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{engine.url}/health", timeout=1.0).status_code == 200
    return False


def session_database_url(port: int | None = None) -> str:
    """The URL of the database pytest-django made for this session, for worker processes;
    through ``port`` on the same host instead of the server's own (a proxy), if given. On
    SQLite (the tests marked ``sqlite``), the test database's file, which they share."""
    s = connection.settings_dict
    if connection.vendor == "sqlite" and port is None:
        return f"sqlite:///{s['NAME']}"
    assert connection.vendor == "postgresql", (
        "worker processes need a database server or a SQLite file, and a proxy in front of "
        "the database a server: run under ./scripts/test, which sets DATABASE_URL to PostgreSQL"
    )
    return f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST']}:{port or s['PORT']}/{s['NAME']}"


def start_worker(
    folder: Path,
    name: str,
    queue: str,
    runs_dir: Path,
    *,
    concurrency: int = 2,
    **env_overrides: str,
) -> DbWorker:
    """A real Celery worker process on the test database, consuming ``queue`` only (and its
    own worker-direct queue), hosting up to ``concurrency`` runs; ``env_overrides`` (a
    proxied DATABASE_URL, another REDIS_URL) win over the defaults."""
    log_path = folder / f"worker-{name}.log"
    env = {
        **os.environ,
        "DATABASE_URL": session_database_url(),
        "PACER_CELERY_QUEUE": queue,
        "PACER_RUNS_DIR": str(runs_dir),
        **env_overrides,
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                str(VENV_BIN / "celery"),
                "-A",
                "workers.celery",
                "worker",
                "-Q",
                queue,
                "-n",
                f"{name}-{queue}@%h",
                "--concurrency",
                str(concurrency),
                "-l",
                "INFO",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = DbWorker(name, process, log_path)
    wait_for(
        lambda: b"ready." in log_path.read_bytes() or process.poll() is not None,
        STARTUP_S,
        "worker",
    )
    assert process.poll() is None, worker.log()[-3000:]
    return worker


def stop_worker(worker: DbWorker) -> None:
    stop_process_group(worker.process, grace_seconds=30.0)


def wait_for(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    every: float = 0.2,
    explain: Callable[[], str] | None = None,
) -> T:
    """``condition()``'s first truthy value within ``timeout`` seconds; fails naming ``what``
    and adding ``explain()``, what happened meanwhile (a timeout on CI is otherwise mute)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            told = "" if explain is None else f"; meanwhile: {explain()}"
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{told}")
        time.sleep(every)


def decisions_of(run: Run, last: int = 20) -> str:
    """The run's last decisions, oldest first: kind, cap and reason."""
    rows = Decision.objects.filter(run=run).order_by("-at")[:last]
    told = [f"{d.kind} {d.cap_before}->{d.cap_after}: {d.reason}" for d in reversed(rows)]
    return " | ".join(told) or "no decision"


def operator_api(username: str) -> Any:
    """An API client signed in as a new operator (DRF's test client, in this process)."""
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    from controlplane.runs.roles import grant

    user = get_user_model().objects.create_user(username=username, password="pw")
    grant(user, "operator")
    api = APIClient()
    api.force_authenticate(user)
    return api


def run_document(engines: list[SimEngine], **top: Any) -> dict[str, Any]:
    """A small multi-turn run on ``engines``: quick steps, fast polls."""
    document: dict[str, Any] = {
        "name": "hosted",
        "batch_size": 16,
        "group_size": 4,
        "max_steps": 5,
        "concurrency": {
            "policy": "pacer",
            "max_inflight": 128,
            "poll_interval_s": 0.5,
            "pacing": {"window": 0.5},  # the cap fills in seconds, not minutes
        },
        "env": [
            {
                "name": "multiturn",
                "args": {"turns": 2, "prompt_tokens": 64, "observation_tokens": 32},
                "sampling": {"max_tokens": 32},
            }
        ],
        "engine": [{"url": engine.url} for engine in engines],
        "wandb": {"mode": "disabled"},
    }
    document.update(top)
    return document


def kill_worker(worker: DbWorker) -> None:
    """SIGKILL to the worker's process group, waited for."""
    os.killpg(worker.process.pid, signal.SIGKILL)
    worker.process.wait()


def stop_workers(*workers: DbWorker | None) -> None:
    """Stop every worker still running (SIGCONT first, in case a test left it stopped)."""
    for worker in workers:
        if worker is not None and worker.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.process.pid, signal.SIGCONT)
            stop_worker(worker)


def end_run(run: Run) -> None:
    """Stop the run unless it has ended, and wait until it has."""
    from controlplane.runs.services import override_create

    run.refresh_from_db()
    if not run.is_ended:
        override_create(run=run, created_by=None, mode="stop", reason="test over")
    wait_for(lambda: Run.objects.get(pk=run.pk).state in RunState.ended(), 90, "the run to end")


def step_groups(steps_dir: Path) -> dict[int, list[str]]:
    """Each step on disk and the group ids in it, read from its samples."""
    found = {}
    for folder in steps_dir.iterdir():
        if folder.name.isdigit():
            lines = (folder / "samples.jsonl").read_text().splitlines()
            found[int(folder.name)] = [json.loads(line)["group_id"] for line in lines]
    return found
