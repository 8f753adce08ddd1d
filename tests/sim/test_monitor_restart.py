"""A real restart under a real monitor: a simulator process killed and started again on its
port between two polls of an ``EngineMonitor`` over HTTP, with another ``--max-model-len``,
and busier in its second life than in its first, so that no counter goes backwards.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx

from inference.engine_http import engine_http_client
from inference.metrics.client import MetricsClient
from inference.metrics.endpoints import EngineSpec
from inference.metrics.monitor import EngineMonitor
from inference.metrics.warnings import WarningKind
from tests.conftest import REPO_ROOT, free_port, signal_group, stop_process_group
from workers.core.clock import MonotonicClock
from workers.core.samples import EngineHealth, LoadSample

MODEL = "sim-restart"
# A fresh interpreter imports the simulator in about a second; the slack covers a busy machine.
STARTUP_TIMEOUT_S = 30.0
HEALTH_POLL_S = 0.1


@contextlib.contextmanager
def simulator(port: int, max_model_len: int) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m inference.sim`` on ``port``, healthy on entry, its process group gone on exit."""
    command = [sys.executable, "-m", "inference.sim", "--port", str(port), "--preset", "cpu-tiny"]
    command += ["--max-model-len", str(max_model_len), "--served-model-name", MODEL]
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                    break
            assert time.monotonic() < deadline, "simulator not healthy in time"
            time.sleep(HEALTH_POLL_S)
        yield process
    finally:
        stop_process_group(process)


def generate(port: int, tokens: int) -> None:
    """Make the engine generate exactly ``tokens`` tokens (it runs each answer to max_tokens)."""
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": tokens}
    response = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=30.0)
    response.raise_for_status()
    assert response.json()["usage"]["completion_tokens"] == tokens


async def test_an_engine_relaunched_past_its_old_counters_is_a_restart() -> None:
    port = free_port()
    spec = EngineSpec("sim", f"http://127.0.0.1:{port}")
    async with MetricsClient(engine_http_client(max_connections=1)) as client:
        monitor = EngineMonitor([spec], client, MonotonicClock())
        with simulator(port, max_model_len=1024) as first_life:
            generate(port, 40)
            before = await monitor.poll()
            signal_group(first_life.pid, signal.SIGKILL)  # a crash: nothing is shut down cleanly
            first_life.wait()
        with simulator(port, max_model_len=2048):
            generate(port, 300)
            restart = await monitor.poll()
            generate(port, 50)
            after = await monitor.poll()
    (first,) = before.samples
    (relaunched,) = restart.samples
    (settled,) = after.samples
    assert (first.health, first.max_model_len) == (EngineHealth.UP, 1024)
    assert observed(relaunched) == (EngineHealth.UP, True, 0, 2048)
    assert [(w.kind, w.engine_id) for w in restart.warnings] == [
        (WarningKind.ENGINE_RESTART, "sim/0")
    ]
    assert observed(settled) == (EngineHealth.UP, False, 50, 2048)
    assert after.warnings == ()


def observed(sample: LoadSample) -> tuple[EngineHealth, bool, int, int | None]:
    return sample.health, sample.restarted, sample.generation_tokens, sample.max_model_len
