"""From an operator's POST of a pin to its decision being readable from the API.

    python -m bench.override_latency [--overrides 50] [--engines 2]

Starts a whole stack in processes (bench.stack: a throwaway PostgreSQL database, daphne, a
Celery worker, simulated engines), creates a run through the API and waits for its start,
then sends ``--overrides`` pins one after another, each timed from just before
``POST /api/runs/{id}/override/`` to the first ``GET /api/runs/{id}/decisions/?kind=pin``
that lists its decision (polled every 5 ms). The path: the web process stores the override
and publishes a wake-up on Redis; the run's command listener reads it and the controller
decides; the reporter flushes (at once on a decision) and settles the override.

The goal is well under a second. Also printed: the same span as the database saw it (the
decision's time less the override's), which leaves out the HTTP round trips and the polling.
Needs PostgreSQL at DATABASE_URL (the worker is another process) and Redis at REDIS_URL.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import datetime
from typing import Any

import httpx

from bench.stack import pacer_stack, wait_until

POLL_S = 0.005  # how often the decision list is read while waiting for one


def run_config(engine_urls: list[str]) -> dict[str, Any]:
    return {
        "name": "override-latency",
        "batch_size": 16,
        "group_size": 4,
        "max_steps": 100_000,  # runs until stopped
        "concurrency": {"policy": "pacer", "max_inflight": 256, "poll_interval_s": 1.0},
        "env": [
            {
                "name": "multiturn",
                "args": {"turns": 2, "prompt_tokens": 64, "observation_tokens": 32},
                "sampling": {"max_tokens": 32},
            }
        ],
        "engine": [{"url": url} for url in engine_urls],
        "wandb": {"mode": "disabled"},
    }


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overrides", type=int, default=50)
    parser.add_argument("--engines", type=int, default=2)
    args = parser.parse_args()
    with pacer_stack(args.engines, PACER_OVERRIDE_RATE="10000/minute") as stack:
        api = httpx.Client(
            base_url=stack.web_url,
            headers={"Authorization": f"Token {stack.token}"},
            timeout=30.0,
        )
        run = api.post("/api/runs/", json=run_config(stack.engine_urls))
        run.raise_for_status()
        run_id = run.json()["id"]
        decisions = f"/api/runs/{run_id}/decisions/"
        wait_until(
            lambda: api.get(decisions, params={"kind": "bootstrap"}).json()["results"],
            "the run to start",
            timeout=120,
        )
        seen: int | None = None
        spans: list[float] = []
        stored: list[float] = []
        for n in range(args.overrides):
            cap = 16 + n % 32
            body = {"mode": "pin", "cap": cap, "ttl_s": 600, "reason": f"bench {n}"}
            started = time.perf_counter()
            posted = api.post(f"/api/runs/{run_id}/override/", json=body)
            posted.raise_for_status()
            override = posted.json()
            while True:
                params = {"kind": "pin"} | ({"since": str(seen)} if seen is not None else {})
                found = [
                    d
                    for d in api.get(decisions, params=params).json()["results"]
                    if d["override"] == override["id"]
                ]
                if found:
                    spans.append(time.perf_counter() - started)
                    break
                time.sleep(POLL_S)
            decision = found[0]
            assert decision["cap_after"] == cap, decision
            seen = decision["id"]
            stored.append(
                (
                    datetime.fromisoformat(decision["at"])
                    - datetime.fromisoformat(override["created_at"])
                ).total_seconds()
            )
        api.post(f"/api/runs/{run_id}/stop/", json={"reason": "benchmark done"})
    ms = [s * 1000 for s in spans]
    db_ms = [s * 1000 for s in stored]
    print(f"{len(ms)} pins, POST to the decision readable from GET decisions:")
    print(
        f"  median {statistics.median(ms):.0f} ms, p99 {percentile(ms, 0.99):.0f} ms, "
        f"min {min(ms):.0f} ms, max {max(ms):.0f} ms, mean {statistics.fmean(ms):.0f} ms"
    )
    print("override stored to decision stored (database clocks):")
    print(f"  median {statistics.median(db_ms):.0f} ms, p99 {percentile(db_ms, 0.99):.0f} ms")


if __name__ == "__main__":
    main()
