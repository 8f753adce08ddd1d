"""Two workers host 20 runs between them; one is killed; its runs move to the other.

    python -m bench.failover [--runs 20]

Starts a whole stack in processes (bench.stack) and a second worker, each hosting up to
``--runs`` runs, creates the runs through the API (small multi-turn runs on two simulated
engines), waits until every run is hosted and has written a step, then kills (SIGKILL) the
worker hosting the most. Printed: how many runs each worker held, how long until each of the
killed worker's runs was hosted again (its lease expiring, a sweep queueing it, the other
worker restoring it), and whether every run then wrote steps 1..N each once.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import socket
import statistics
import time

import httpx
import psycopg

from bench.override_latency import run_config
from bench.stack import BIN, answers_ping, pacer_stack, wait_until


def leases(database: str) -> dict[int, str]:
    """Each hosted run's worker (its lease owner's node name)."""
    with psycopg.connect(database) as db:
        rows = db.execute("SELECT id, lease_owner FROM runs_run WHERE lease_owner <> ''")
        return {run_id: owner.split("/")[0] for run_id, owner in rows}


def steps_of(database: str) -> dict[int, list[int]]:
    with psycopg.connect(database) as db:
        rows = db.execute("SELECT run_id, step FROM runs_steprecord ORDER BY run_id, step")
        found: dict[int, list[int]] = collections.defaultdict(list)
        for run_id, step in rows:
            found[run_id].append(step)
        return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    concurrency = str(args.runs)
    with pacer_stack(2, worker_concurrency=args.runs, PACER_OVERRIDE_RATE="10000/minute") as stack:
        queue, database = stack.env["PACER_CELERY_QUEUE"], stack.env["DATABASE_URL"]
        second = stack.start(
            "worker-b", str(BIN / "celery"), "-A", "workers.celery", "worker", "-Q", queue,
            "-n", f"second-{queue}@%h", "--concurrency", concurrency, "-l", "WARNING",
        )  # fmt: skip
        first = stack.processes[-2]  # pacer_stack's own worker, started before this one
        node = f"second-{queue}@{socket.gethostname()}"  # pacer_stack waited for its own
        wait_until(lambda: answers_ping(stack.env, node), f"worker {node}", timeout=120)
        headers = {"Authorization": f"Token {stack.token}"}
        with httpx.Client(base_url=stack.web_url, headers=headers, timeout=60.0) as api:
            for n in range(args.runs):
                config = run_config(stack.engine_urls) | {"name": f"failover-{n}"}
                config["concurrency"] = {**config["concurrency"], "max_inflight": 16}
                api.post("/api/runs/", json=config).raise_for_status()
        wait_until(
            lambda: len(steps_of(database)) == args.runs and len(leases(database)) == args.runs,
            "every run hosted with a step written",
            timeout=600,
        )
        held = leases(database)
        by_worker = collections.Counter(held.values())
        victim_name = by_worker.most_common(1)[0][0]
        victim = second if victim_name.startswith("second-") else first
        moving = sorted(run for run, owner in held.items() if owner == victim_name)
        killed_at = time.monotonic()
        os.killpg(victim.pid, signal.SIGKILL)
        moved_after: dict[int, float] = {}
        while len(moved_after) < len(moving):
            now = leases(database)
            for run in moving:
                if run not in moved_after and now.get(run, victim_name) != victim_name:
                    moved_after[run] = time.monotonic() - killed_at
            assert time.monotonic() - killed_at < 300, "the runs did not move"
            time.sleep(0.2)
        before = {run: max(steps) for run, steps in steps_of(database).items()}
        wait_until(
            lambda: all(max(s) > before[r] for r, s in steps_of(database).items() if r in moving),
            "every moved run to write a step on its new worker",
            timeout=600,
        )
        steps = steps_of(database)
    print(f"{args.runs} runs on 2 workers: {dict(by_worker)}")
    print(f"killed {victim_name} with {len(moving)} runs; each hosted again after")
    times = sorted(moved_after.values())
    print(
        f"  median {statistics.median(times):.1f} s, max {times[-1]:.1f} s (lease 20 s + a sweep)"
    )
    contiguous = all(s == list(range(1, len(s) + 1)) for s in steps.values())
    print(f"  every run's steps 1..N each recorded once: {contiguous}")


if __name__ == "__main__":
    main()
