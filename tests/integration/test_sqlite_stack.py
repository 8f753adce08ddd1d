"""The quick start's database under an operator's ordinary load: a stack on a SQLite file, as
scripts/run makes it (DEBUG on, served on loopback), takes concurrent overrides with no run
writing, and again with three runs hosted and writing, without one 500."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from bench.override_latency import run_config
from bench.stack import Stack, pacer_stack, wait_until

pytestmark = pytest.mark.integration

RUNS = 3
AT_ONCE_IDLE = 12  # concurrent overrides while no run writes
AT_ONCE_HOSTED = 40  # concurrent overrides while three runs write their polls and steps


def at_once(count: int, send: Callable[[int], int]) -> Counter[int]:
    """``send(n)`` for n in 0..count-1 from as many threads, released together: statuses."""
    start = threading.Barrier(count)

    def released(n: int) -> int:
        start.wait()
        return send(n)

    with ThreadPoolExecutor(count) as pool:
        return Counter(pool.map(released, range(count)))


def started(api: httpx.Client, run_id: int) -> bool:
    decisions = api.get(f"/api/runs/{run_id}/decisions/", params={"kind": "bootstrap,restore"})
    return bool(decisions.json()["results"])


def state(api: httpx.Client, run_id: int) -> str:
    return api.get(f"/api/runs/{run_id}/").json()["state"]


def test_overrides_on_the_quick_starts_sqlite_never_answer_500() -> None:
    with pacer_stack(
        engines=2,
        worker_concurrency=RUNS,
        database="sqlite",
        DEBUG="true",  # as scripts/run serves on loopback
        PACER_OVERRIDE_RATE="100000/minute",
    ) as stack:
        answers = _load(stack)
    assert answers["idle"] == {202: AT_ONCE_IDLE}, answers
    assert answers["hosted"] == {202: AT_ONCE_HOSTED}, answers


def _load(stack: Stack) -> dict[str, Counter[int]]:
    clients = [
        httpx.Client(
            base_url=stack.web_url, headers={"Authorization": f"Token {stack.token}"}, timeout=60
        )
        for _ in range(4)
    ]
    api = clients[0]
    runs = []
    for n in range(RUNS):
        created = api.post("/api/runs/", json={**run_config(stack.engine_urls), "name": f"r{n}"})
        assert created.status_code == 201, created.text
        runs.append(created.json()["id"])
    for run_id in runs:
        wait_until(lambda r=run_id: started(api, r), f"run {run_id} to start", timeout=120)
    for run_id in runs:
        assert api.post(f"/api/runs/{run_id}/pause/", json={"reason": "idle"}).status_code == 202
    for run_id in runs:
        wait_until(lambda r=run_id: state(api, r) == "paused", f"run {run_id} to pause")

    def override(n: int) -> int:
        body = {"mode": "set", "cap": 8 + n % 32, "reason": f"load {n}"}
        return clients[n % 4].post(f"/api/runs/{runs[n % RUNS]}/override/", json=body).status_code

    idle = at_once(AT_ONCE_IDLE, override)
    for run_id in runs:
        assert api.post(f"/api/runs/{run_id}/resume/", json={"reason": "go"}).status_code == 202
    for run_id in runs:
        wait_until(lambda r=run_id: state(api, r) == "running", f"run {run_id} to run again")
    hosted = at_once(AT_ONCE_HOSTED, override)
    for run_id in runs:
        api.post(f"/api/runs/{run_id}/stop/", json={"reason": "done"})
    return {"idle": idle, "hosted": hosted}
