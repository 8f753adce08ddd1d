"""Operators' overrides on the quick start's stack, steady and in bursts: the answers per status.

    python -m bench.override_load [--steady 200] [--bursts 200] [--rate 10]

Starts the stack as ``./scripts/run`` has it (bench.stack with a SQLite file, DEBUG on,
daphne on loopback, one Celery worker, two simulated engines, the default command rate
``PACER_OVERRIDE_RATE`` of 60 a minute per user), hosts three runs, and waits until each has
started. Then:

- steady: ``--steady`` overrides from two clients at ``--rate`` a second in all, each its own
  operator sending on a fixed schedule;
- bursts: ``--bursts`` overrides from four other operators, each sending its share back to
  back (the next as soon as the last is answered), all four at once.

Every override is a ``set`` of one of the runs, round robin. It prints how many answers each
status got, per phase and per client, and their latencies: a 500 is a failure of the stack
(SQLite used to answer "database is locked"), a 429 the rate limit doing its work (each
operator's 61st command within a minute), 202 a command stored. Needs Redis at REDIS_URL.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from bench.override_latency import percentile, run_config
from bench.stack import Stack, pacer_stack, wait_until

RUNS = 3
STEADY_CLIENTS = 2
BURST_CLIENTS = 4


@dataclass
class Tally:
    """The answers one client got."""

    statuses: Counter[str] = field(default_factory=Counter)
    seconds: dict[str, list[float]] = field(default_factory=dict)

    def add(self, status: str, spent: float) -> None:
        self.statuses[status] += 1
        self.seconds.setdefault(status, []).append(spent)


def operator(stack: Stack, name: str) -> httpx.Client:
    out = stack.manage("pacer_user", name, "--role", "operator")
    token = out.split("API token: ")[1].strip()
    return httpx.Client(
        base_url=stack.web_url, headers={"Authorization": f"Token {token}"}, timeout=60
    )


def send(client: httpx.Client, run_id: int, n: int, tally: Tally) -> None:
    body = {"mode": "set", "cap": 8 + n % 32, "reason": f"load {n}"}
    started = time.perf_counter()
    try:
        status = str(client.post(f"/api/runs/{run_id}/override/", json=body).status_code)
    except httpx.HTTPError as failed:
        status = type(failed).__name__
    tally.add(status, time.perf_counter() - started)


def steady(clients: list[httpx.Client], runs: list[int], total: int, rate: float) -> list[Tally]:
    """``total`` overrides at ``rate`` a second in all, the clients taking turns."""
    tallies = [Tally() for _ in clients]
    start = time.perf_counter()

    def one_client(index: int) -> None:
        for n in range(index, total, len(clients)):
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            send(clients[index], runs[n % len(runs)], n, tallies[index])

    with ThreadPoolExecutor(len(clients)) as pool:
        list(pool.map(one_client, range(len(clients))))
    return tallies


def bursts(clients: list[httpx.Client], runs: list[int], total: int) -> list[Tally]:
    """``total`` overrides, each client sending its share back to back, all at once."""
    tallies = [Tally() for _ in clients]
    go = threading.Barrier(len(clients))

    def one_client(index: int) -> None:
        go.wait()
        for n in range(index, total, len(clients)):
            send(clients[index], runs[n % len(runs)], n, tallies[index])

    with ThreadPoolExecutor(len(clients)) as pool:
        list(pool.map(one_client, range(len(clients))))
    return tallies


def report(phase: str, tallies: list[Tally], elapsed: float) -> None:
    total: Counter[str] = Counter()
    for tally in tallies:
        total.update(tally.statuses)
    sent = sum(total.values())
    counts = ", ".join(f"{status}: {count}" for status, count in sorted(total.items()))
    print(f"{phase}: {sent} overrides in {elapsed:.1f} s ({sent / elapsed:.1f}/s): {counts}")
    for index, tally in enumerate(tallies):
        mine = ", ".join(f"{s}: {c}" for s, c in sorted(tally.statuses.items()))
        print(f"  client {index + 1}: {mine}")
    merged: dict[str, list[float]] = {}
    for tally in tallies:
        for status, spent in tally.seconds.items():
            merged.setdefault(status, []).extend(spent)
    for status, spent in sorted(merged.items()):
        ms = [s * 1000 for s in spent]
        print(
            f"  {status} answered in a median {statistics.median(ms):.0f} ms, "
            f"p99 {percentile(ms, 0.99):.0f} ms, max {max(ms):.0f} ms"
        )
    print(f"  500s: {total['500']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steady", type=int, default=200, help="overrides sent steadily")
    parser.add_argument("--bursts", type=int, default=200, help="overrides sent in bursts")
    parser.add_argument("--rate", type=float, default=10.0, help="steady overrides a second")
    args = parser.parse_args()
    with pacer_stack(engines=2, worker_concurrency=RUNS, database="sqlite", DEBUG="true") as stack:
        print(f"stack: SQLite, DEBUG on, {RUNS} runs on 2 simulated engines, {stack.web_url}")
        setup = operator(stack, "bench-setup")
        runs = []
        for n in range(RUNS):
            config = {**run_config(stack.engine_urls), "name": f"load-{n}"}
            created = setup.post("/api/runs/", json=config)
            created.raise_for_status()
            runs.append(created.json()["id"])
        for run_id in runs:
            wait_until(
                lambda r=run_id: setup.get(
                    f"/api/runs/{r}/decisions/", params={"kind": "bootstrap"}
                ).json()["results"],
                f"run {run_id} to start",
                timeout=120,
            )
        print(f"runs {runs} hosted and writing")
        clients = [operator(stack, f"bench-steady-{n}") for n in range(STEADY_CLIENTS)]
        started = time.perf_counter()
        report(
            f"steady, {STEADY_CLIENTS} clients at {args.rate:g}/s",
            steady(clients, runs, args.steady, args.rate),
            time.perf_counter() - started,
        )
        clients = [operator(stack, f"bench-burst-{n}") for n in range(BURST_CLIENTS)]
        started = time.perf_counter()
        report(
            f"bursts, {BURST_CLIENTS} clients back to back",
            bursts(clients, runs, args.bursts),
            time.perf_counter() - started,
        )
        for run_id in runs:
            setup.post(f"/api/runs/{run_id}/stop/", json={"reason": "benchmark done"})


if __name__ == "__main__":
    main()
