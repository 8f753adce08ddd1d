"""Fixtures shared by every test folder: free ports and real processes started per session."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def pytest_configure(config: pytest.Config) -> None:
    """Let a SIGTERM (a CI timeout, ``timeout``) end the session as Ctrl-C does, with every
    fixture's teardown: the servers the fixtures start run in sessions of their own, which no
    signal to the test run's process group reaches."""
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """scripts/test's second pass (``PACER_SQLITE_PASS=1``, on a SQLite file) runs only the
    tests marked ``sqlite``: the others ran in the first pass, and many rely on PostgreSQL
    (rollups, proxies in front of the database server, SKIP LOCKED)."""
    if os.environ.get("PACER_SQLITE_PASS") != "1":
        return
    kept = [item for item in items if item.get_closest_marker("sqlite")]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_process_group(process: subprocess.Popen[bytes], grace_seconds: float = 10.0) -> None:
    """Ends a process started with ``start_new_session`` and every child it made.

    The group is signalled even when its leader has already exited: a crashed server's
    children (vLLM's engine core, say) may still be running.
    """
    signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        signal_group(process.pid, signal.SIGKILL)
        process.wait()
    deadline = time.monotonic() + grace_seconds
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    signal_group(process.pid, signal.SIGKILL)


def signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def celery_queue() -> str:
    """A queue of this test session's own, so no other worker on the same Redis takes its tasks."""
    return f"pacer-test-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Worker:
    process: subprocess.Popen[bytes]
    log_path: Path  # its stdout and stderr


@pytest.fixture(scope="session")
def celery_worker(celery_queue: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A real Celery worker process, consuming the session's queue through the real broker."""
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                str(VENV_BIN / "celery"),
                "-A",
                "workers.celery",
                "worker",
                "-Q",
                celery_queue,
                "-n",
                f"{celery_queue}@%h",
                "--concurrency",
                "1",
                "-l",
                "INFO",
            ],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while b"ready." not in log_path.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_process_group(process)
            pytest.fail(f"celery worker did not start:\n{log_path.read_text()}")
        time.sleep(0.2)
    yield Worker(process, log_path)
    stop_process_group(process)


@pytest.fixture(scope="session", autouse=True)
def private_rate_limits() -> Iterator[None]:
    """Rate-limit counts (commands, sign-in failures) under a prefix of this session's own,
    here and in the servers it starts: user ids and names repeat across test databases, and
    failures counted by an earlier session would lock this one's users out."""
    from django.test import override_settings

    prefix = f"pacer-test-{uuid.uuid4().hex[:12]}"
    before = os.environ.get("PACER_THROTTLE_PREFIX")
    os.environ["PACER_THROTTLE_PREFIX"] = prefix
    with override_settings(PACER_THROTTLE_PREFIX=prefix):
        yield
    if before is None:
        del os.environ["PACER_THROTTLE_PREFIX"]
    else:
        os.environ["PACER_THROTTLE_PREFIX"] = before


@pytest.fixture(scope="session", autouse=True)
def private_channels() -> Iterator[None]:
    """Live events under a prefix of this session's own, here and in the servers and workers
    it starts: run ids restart with each test database, and another session on the same Redis
    has a run 1 too, whose events would otherwise reach this session's websockets."""
    from django.conf import settings
    from django.test import override_settings

    prefix = f"pacer-test-{uuid.uuid4().hex[:12]}"
    layers = {"default": {**settings.CHANNEL_LAYERS["default"]}}
    layers["default"]["CONFIG"] = {**layers["default"]["CONFIG"], "prefix": prefix}
    before = os.environ.get("PACER_CHANNELS_PREFIX")
    os.environ["PACER_CHANNELS_PREFIX"] = prefix
    with override_settings(CHANNEL_LAYERS=layers):
        yield
    if before is None:
        del os.environ["PACER_CHANNELS_PREFIX"]
    else:
        os.environ["PACER_CHANNELS_PREFIX"] = before


@pytest.fixture
def queue() -> Iterator[str]:
    """A Celery queue of this test's own: tasks it sends go only to the workers it starts."""
    from workers.celery import app

    name = f"pacer-test-{uuid.uuid4().hex[:8]}"
    before = app.conf.task_default_queue
    app.conf.task_default_queue = name
    yield name
    app.conf.task_default_queue = before


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    """Where the workers a test starts keep run folders (PACER_RUNS_DIR)."""
    return tmp_path / "runs"


def fresh(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` in a fresh process with neither DEBUG nor SECRET_KEY set, unless in
    ``env``."""
    inherited = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY")}
    return subprocess.run(
        [str(VENV_BIN / "python"), *argv],
        cwd=REPO_ROOT,
        env={**inherited, "DJANGO_SETTINGS_MODULE": "controlplane.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
