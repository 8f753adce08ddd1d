"""Two workers host 20 runs between them; one fails; its runs move to the other, and the
failed one, should it wake, writes nothing into them.

    python -m bench.failover [--runs 20] [--stall kill|sigstop|hung-db] [--stall-s 32]

Starts a whole stack in processes (bench.stack) and a second worker, each hosting up to
``--runs`` runs, creates the runs through the API (small multi-turn runs on two simulated
engines), waits until every run is hosted and has written a step, then makes one worker fail:

- ``kill``: SIGKILL to the worker hosting the most runs;
- ``sigstop``: SIGSTOP to it for ``--stall-s`` seconds (past the lease), then SIGCONT: it
  wakes holding runs that are another's now;
- ``hung-db``: the second worker reaches PostgreSQL through a proxy
  (``tests.faults.proxies hold``) that, from then on, holds every packet both ways and closes
  nothing, for ``--stall-s`` seconds; then the packets it held flow again.

Then every run is stopped through the API and, for each run, printed: whether its steps were
written once (the step folders 1..N on disk, each group in one step, the step records the
same steps), whether its decisions were written by its lease holders only (the hosts of its
decisions in id order: a host that wrote after losing its lease shows up twice), and for the
failed worker's runs the time until the other worker hosted them.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

from bench.override_latency import run_config
from bench.stack import BIN, Stack, answers_ping, free_port, pacer_stack, wait_until

LEASE_TTL_S, SWEEP_S = 20.0, 5.0  # workers/runtime/lease.py's (it needs Django's settings)
BOUND_S = LEASE_TTL_S + SWEEP_S + 5.0  # the promise: a lease, a sweep and 5 s


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


def decision_hosts(database: str) -> dict[int, list[str]]:
    """Each run's decision hosts (worker node names) in id order, consecutive repeats merged."""
    with psycopg.connect(database) as db:
        rows = db.execute("SELECT run_id, host FROM runs_decision ORDER BY run_id, id")
        found: dict[int, list[str]] = collections.defaultdict(list)
        for run_id, host in rows:
            node = host.split("/")[0]
            if not found[run_id] or found[run_id][-1] != node:
                found[run_id].append(node)
        return found


def files_once(steps_dir: Path, recorded: list[int]) -> bool:
    """The step folders are 1..N, the step records the same, and no group is in two steps."""
    folders = {int(p.name): p for p in steps_dir.iterdir() if p.name.isdigit()}
    groups: list[str] = []
    for folder in folders.values():
        lines = (folder / "samples.jsonl").read_text().splitlines()
        groups.extend({json.loads(line)["group_id"] for line in lines if line})
    contiguous = sorted(folders) == list(range(1, len(folders) + 1))
    return contiguous and sorted(folders) == recorded and len(groups) == len(set(groups))


@contextlib.contextmanager
def holding_proxy(stack: Stack, database: str) -> Iterator[tuple[str, Path]]:
    """A ``hold`` proxy in front of the database's server: (the URL through it, its fault
    file, which holds every packet while it exists)."""
    parts = urlsplit(database)
    port, fault = free_port(), stack.folder / "hold.fault"
    proxy = stack.start(
        "proxy", str(BIN / "python"), "-m", "tests.faults.proxies", "hold", "--port", str(port),
        "--upstream", f"{parts.hostname}:{parts.port or 5432}", "--fault", str(fault),
    )  # fmt: skip
    wait_until(lambda: "ready" in (stack.folder / "proxy.log").read_text(), "the proxy")
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    proxied = urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) > 1 else host))
    try:
        yield proxied, fault
    finally:
        fault.unlink(missing_ok=True)
        proxy.poll()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--stall", choices=("kill", "sigstop", "hung-db"), default="kill")
    parser.add_argument("--stall-s", type=float, default=32.0)
    args = parser.parse_args()
    with (
        pacer_stack(2, worker_concurrency=args.runs, PACER_OVERRIDE_RATE="10000/minute") as stack,
        holding_proxy(stack, stack.env["DATABASE_URL"]) as (proxied, fault),
    ):
        report(stack, args, proxied, fault)


def report(stack: Stack, args: argparse.Namespace, proxied: str, fault: Path) -> None:
    queue, database = stack.env["PACER_CELERY_QUEUE"], stack.env["DATABASE_URL"]
    first = next(p for p in stack.processes if "worker" in map(str, p.args))
    second = stack.start(
        "worker-b", str(BIN / "celery"), "-A", "workers.celery", "worker", "-Q", queue,
        "-n", f"second-{queue}@%h", "--concurrency", str(args.runs), "-l", "WARNING",
        env={**stack.env, "DATABASE_URL": proxied} if args.stall == "hung-db" else None,
    )  # fmt: skip
    node = f"second-{queue}@{socket.gethostname()}"
    wait_until(lambda: answers_ping(stack.env, node), f"worker {node}", timeout=120)
    headers = {"Authorization": f"Token {stack.token}"}
    with httpx.Client(base_url=stack.web_url, headers=headers, timeout=60.0) as api:
        ids = []
        for n in range(args.runs):
            config = run_config(stack.engine_urls) | {"name": f"failover-{n}"}
            config["concurrency"] = {**config["concurrency"], "max_inflight": 16}
            ids.append(api.post("/api/runs/", json=config).raise_for_status().json()["id"])
        wait_until(
            lambda: len(steps_of(database)) == args.runs and len(leases(database)) == args.runs,
            "every run hosted with a step written",
            timeout=600,
        )
        held = leases(database)
        by_worker = collections.Counter(held.values())
        victim_name = node if args.stall == "hung-db" else by_worker.most_common(1)[0][0]
        victim = second if victim_name.startswith("second-") else first
        moving = sorted(run for run, owner in held.items() if owner == victim_name)
        failed_at = time.monotonic()
        stall(victim, args.stall, fault)
        moved_after: dict[int, float] = {}
        while len(moved_after) < len(moving):
            now = leases(database)
            for run in moving:
                owner = now.get(run, victim_name)
                if run not in moved_after and owner and owner != victim_name:
                    moved_after[run] = time.monotonic() - failed_at
            assert time.monotonic() - failed_at < 300, "the runs did not move"
            time.sleep(0.2)
        time.sleep(max(0.0, args.stall_s - (time.monotonic() - failed_at)))
        wake(victim, args.stall, fault)
        before = {run: max(steps) for run, steps in steps_of(database).items()}
        wait_until(
            lambda: all(max(s) > before[r] for r, s in steps_of(database).items() if r in moving),
            "every moved run to write a step on its new worker",
            timeout=600,
        )
        time.sleep(5.0)  # what the woken worker had pending has been sent by now
        for run_id in ids:
            api.post(f"/api/runs/{run_id}/stop/", json={"reason": "bench over"})
        wait_until(
            lambda: all(
                api.get(f"/api/runs/{r}/").json()["state"] in ("cancelled", "completed")
                for r in ids
            ),
            "every run to stop",
            timeout=300,
        )
    print_report(args, stack, database, ids, by_worker, victim_name, moving, moved_after)


def stall(victim: subprocess.Popen[bytes], how: str, fault: Path) -> None:
    if how == "kill":
        os.killpg(victim.pid, signal.SIGKILL)
    elif how == "sigstop":
        os.killpg(victim.pid, signal.SIGSTOP)
    else:
        fault.touch()


def wake(victim: subprocess.Popen[bytes], how: str, fault: Path) -> None:
    if how == "sigstop":
        os.killpg(victim.pid, signal.SIGCONT)
    elif how == "hung-db":
        fault.unlink()


def print_report(
    args: argparse.Namespace,
    stack: Stack,
    database: str,
    ids: list[int],
    by_worker: collections.Counter[str],
    victim_name: str,
    moving: list[int],
    moved_after: dict[int, float],
) -> None:
    steps, hosts = steps_of(database), decision_hosts(database)
    runs_dir = Path(stack.env["PACER_RUNS_DIR"])
    print(f"{args.runs} runs on 2 workers: {dict(by_worker)}; stall: {args.stall}")
    print(f"{victim_name} failed with {len(moving)} runs")
    print(f"{'run':>5} {'steps':>6} {'written once':>13} {'hosts':>6} {'foreign writes':>15} "
          f"{'failover s':>11}")  # fmt: skip
    duplicates = foreign = 0
    for run_id in ids:
        once = files_once(runs_dir / str(run_id) / "steps", steps[run_id])
        tenures = len(hosts[run_id])
        distinct = len(set(hosts[run_id]))
        foreign_writes = tenures - distinct  # a host back after another's tenure
        duplicates += not once
        foreign += foreign_writes > 0
        moved = f"{moved_after[run_id]:.1f}" if run_id in moved_after else "-"
        print(
            f"{run_id:>5} {len(steps[run_id]):>6} {once!s:>13} {distinct:>6} "
            f"{foreign_writes:>15} {moved:>11}"
        )
    times = sorted(moved_after.values())
    print(
        f"failover: median {statistics.median(times):.1f} s, max {times[-1]:.1f} s "
        f"(bound {BOUND_S:g} s: lease {LEASE_TTL_S:g} + sweep {SWEEP_S:g} + 5)"
    )
    print(f"runs with a step missing or written twice: {duplicates}")
    print(f"runs with a decision written outside its host's tenure: {foreign}")


if __name__ == "__main__":
    main()
