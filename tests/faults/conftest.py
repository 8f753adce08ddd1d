"""Real processes that break on demand: proxies, a Redis of the test's own, and the queue,
runs folder and worker harness of the hosted-run tests."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.conftest import REPO_ROOT, VENV_BIN, free_port, stop_process_group
from tests.integration.hosting import wait_for


@dataclass
class Proxy:
    port: int
    fault: Path  # while this file exists, the proxy breaks
    process: subprocess.Popen[bytes]

    def break_(self) -> None:
        self.fault.touch()

    def mend(self) -> None:
        self.fault.unlink(missing_ok=True)


@contextlib.contextmanager
def proxy(kind: str, upstream: str, folder: Path) -> Iterator[Proxy]:
    """A proxy process (``tests.faults.proxies``) on a free port, ready on entry."""
    port = free_port()
    fault = folder / f"{kind}-{port}.fault"
    process = subprocess.Popen(
        [
            str(VENV_BIN / "python"),
            "-m",
            "tests.faults.proxies",
            kind,
            "--port",
            str(port),
            "--upstream",
            upstream,
            "--fault",
            str(fault),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == b"ready", "the proxy did not start"
    try:
        yield Proxy(port, fault, process)
    finally:
        stop_process_group(process)


@dataclass
class OwnRedis:
    """A redis-server of the test's own, which the test may stop and start again."""

    port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(self.answers, 20, "redis-server to answer")

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process)
            self.process = None

    def answers(self) -> bool:
        with contextlib.suppress(redis.RedisError):
            return bool(redis.Redis.from_url(self.url, socket_connect_timeout=0.5).ping())
        return False


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(free_port(), tmp_path)
    server.start()
    yield server
    server.stop()


def seconds_since(start: float) -> float:
    return time.monotonic() - start
