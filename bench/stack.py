"""A whole Pacer stack in processes, for benchmarks: a throwaway PostgreSQL database (or, as
the quick start has it, a SQLite file), the web server (daphne), a Celery worker and simulated
engines, each in a process group of its own, all sharing a private Celery queue and Channels
prefix so nothing else on the same Redis takes their tasks or hears their events. Everything
started is stopped and dropped on exit."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
STARTUP_S = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition: Callable[[], object], what: str, timeout: float = STARTUP_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _answers(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=1.0).status_code == 200
    return False


@dataclass
class Stack:
    folder: Path
    env: dict[str, str]
    web_url: str = ""
    engine_urls: list[str] = field(default_factory=list)
    token: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(
        self, name: str, *argv: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start a process of the stack, with the stack's environment or ``env``."""
        log = (self.folder / f"{name}.log").open("wb")
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env or self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        self.processes.append(process)
        return process

    def manage(self, *argv: str) -> str:
        done = subprocess.run(
            [str(BIN / "python"), "manage.py", *argv],
            cwd=ROOT, env=self.env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return done.stdout

    def stop(self) -> None:
        for process in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@contextlib.contextmanager
def throwaway_database(url: str) -> Iterator[str]:
    """A new, empty database on the server of ``url``; dropped afterwards."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise SystemExit("the benchmark needs PostgreSQL: set DATABASE_URL")
    name = f"pacer_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def answers_ping(env: dict[str, str], node: str) -> bool:
    """The Celery worker ``node`` answered a ping: it is consuming its queue."""
    ping = [str(BIN / "celery"), "-A", "workers.celery", "inspect", "ping", "-d", node, "-t", "2"]
    return subprocess.run(ping, env=env, capture_output=True).returncode == 0


@contextlib.contextmanager
def stack_database(kind: str, folder: Path) -> Iterator[str]:
    """The URL of an empty database for one stack: ``postgresql`` on the server of
    DATABASE_URL (dropped afterwards), or ``sqlite``, a file in ``folder``."""
    if kind == "sqlite":
        yield f"sqlite:///{folder / 'pacer.sqlite3'}"
        return
    base = os.environ.get("DATABASE_URL", "postgres://postgres:postgres@127.0.0.1:5432/postgres")
    with throwaway_database(base) as url:
        yield url


@contextlib.contextmanager
def pacer_stack(
    engines: int = 2,
    worker_concurrency: int = 2,
    database: str = "postgresql",
    engine_args: tuple[str, ...] = (),
    **env: str,
) -> Iterator[Stack]:
    """The stack, up and answering; ``engine_args`` go to every simulated engine's command."""
    tag = uuid.uuid4().hex[:8]
    with (
        tempfile.TemporaryDirectory() as folder,
        stack_database(database, Path(folder)) as database_url,
    ):
        stack = Stack(
            Path(folder),
            {
                **os.environ,
                "DATABASE_URL": database_url,
                "PACER_CELERY_QUEUE": f"pacer-bench-{tag}",
                "PACER_CHANNELS_PREFIX": f"pacer-bench-{tag}",
                "PACER_RUNS_DIR": str(Path(folder) / "runs"),
                "PACER_LOG_LEVEL": "WARNING",
                "SECRET_KEY": secrets.token_urlsafe(50),  # DEBUG is off: the server needs one
                **env,
            },
        )
        try:
            stack.manage("migrate", "--no-input", "-v", "0")
            out = stack.manage("pacer_user", "bench", "--role", "operator")
            stack.token = out.split("API token: ")[1].strip()
            for index in range(engines):
                port = free_port()
                stack.start(
                    f"sim-{index}", str(BIN / "python"), "-m", "inference.sim",
                    "--port", str(port), "--seed", str(index + 1), *engine_args,
                )  # fmt: skip
                stack.engine_urls.append(f"http://127.0.0.1:{port}")
            port = free_port()
            stack.web_url = f"http://127.0.0.1:{port}"
            stack.start(
                "web", str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port),
                "controlplane.asgi:application",
            )  # fmt: skip
            stack.start(
                "worker", str(BIN / "celery"), "-A", "workers.celery", "worker",
                "-Q", stack.env["PACER_CELERY_QUEUE"], "-n", f"bench-{tag}@%h",
                "--concurrency", str(worker_concurrency), "-l", "WARNING",
            )  # fmt: skip
            for url in stack.engine_urls:
                wait_until(lambda u=url: _answers(f"{u}/health"), f"engine {url}")
            wait_until(lambda: _answers(f"{stack.web_url}/api/health/"), "the web server")
            node = f"bench-{tag}@{socket.gethostname()}"
            wait_until(lambda: answers_ping(stack.env, node), f"worker {node}", timeout=120)
            yield stack
        finally:
            stack.stop()
