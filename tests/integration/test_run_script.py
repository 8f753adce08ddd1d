"""The README's run command brings the stack up with simulated engines, and Ctrl-C leaves
nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO_ROOT, free_port, stop_process_group

pytestmark = pytest.mark.integration

STARTUP_SECONDS = 120
STOP_SECONDS = 60


def processes_mentioning(marker: str) -> list[str]:
    # -ww: never cut long command lines (ps cuts to $COLUMNS otherwise).
    listing = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in listing.splitlines() if marker in line and "ps -ww" not in line]


def terminal_sigint() -> None:
    """SIGINT at its default, as in a terminal's foreground job, even where this test runs
    with it ignored (a background job of a non-interactive shell, as CI may be): bash cannot
    trap a signal that was ignored when it started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_run_script_serves_health_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    engine_ports = [free_port(), free_port()]
    env = {
        **os.environ,
        "PACER_PORT": str(port),
        "PACER_VAR_DIR": str(tmp_path),
        "PACER_SIM_PORTS": ",".join(map(str, engine_ports)),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'pacer.sqlite3'}",
        # Runs queued by another stack on the same Redis are not this one's to host.
        "PACER_CELERY_QUEUE": f"pacer-run-script-{port}",
    }
    log_path = tmp_path / "run.log"
    with log_path.open("wb") as log:
        script = subprocess.Popen(
            [str(REPO_ROOT / "scripts" / "run")],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=terminal_sigint,
        )
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while b"dashboard: http://" not in log_path.read_bytes():
            assert script.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)

        health = httpx.get(f"http://127.0.0.1:{port}/api/health/", timeout=5)
        assert health.status_code == 200
        assert health.json()["database"]["ok"] and health.json()["redis"]["ok"]
        assert "API token: " in log_path.read_text()
        styles = httpx.get(f"http://127.0.0.1:{port}/static/admin/css/base.css", timeout=5)
        assert (styles.status_code, styles.headers["content-type"]) == (200, "text/css")
        assert processes_mentioning(f"pacer-{port}@"), "the worker should be running"
        for engine_port in engine_ports:
            models = httpx.get(f"http://127.0.0.1:{engine_port}/v1/models", timeout=5).json()
            assert models["data"][0]["max_model_len"] > 0

        # Ctrl-C in a terminal sends SIGINT to the whole foreground process group.
        os.killpg(script.pid, signal.SIGINT)
        # The worker gets 10 s, then the rest 10 s together; a loaded machine adds its own.
        assert script.wait(timeout=STOP_SECONDS) == 0, log_path.read_text()
    finally:
        stop_process_group(script)

    time.sleep(1)
    assert processes_mentioning(f"-p {port} controlplane.asgi") == []
    assert processes_mentioning(f"pacer-{port}@") == []
    for engine_port in engine_ports:
        assert processes_mentioning(f"inference.sim --port {engine_port}") == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/api/health/", timeout=2)


def test_an_unknown_demo_engine_kind_stops_the_script_saying_what_it_takes(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(REPO_ROOT / "scripts" / "run")],
        cwd=REPO_ROOT,
        env={**os.environ, "PACER_VAR_DIR": str(tmp_path), "PACER_DEMO_ENGINES": "gpu"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "PACER_DEMO_ENGINES must be sim or vllm, got 'gpu'" in done.stderr
    assert not (tmp_path / "web.log").exists()  # nothing was started
