"""Waits until the stack answers: the health endpoint says ok, a worker returns a ping, and
every engine's ``/health`` answers 200.

Used by ``scripts/run`` so that the dashboard URL is printed only once it works.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

import httpx

# Each probe waits at most this long, so a hung server is retried rather than waited on.
PROBE_TIMEOUT_SECONDS = 2.0
PROBE_INTERVAL_SECONDS = 0.5


def wait_for_ok(url: str, deadline: float) -> str:
    last = "no answer yet"
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url, timeout=PROBE_TIMEOUT_SECONDS)
            if response.status_code == 200:
                return response.text
            last = f"HTTP {response.status_code}: {response.text[:200]}"
        except httpx.HTTPError as error:
            last = f"{type(error).__name__}: {error}"
        time.sleep(PROBE_INTERVAL_SECONDS)
    raise TimeoutError(f"{url} not healthy: {last}")


def wait_for_worker(queue: str, deadline: float) -> dict[str, str | int]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from workers.tasks import ping

    token = uuid.uuid4().hex
    result = ping.apply_async(args=[token], queue=queue)
    answer = result.get(timeout=max(0.1, deadline - time.monotonic()))
    if answer["token"] != token:
        raise RuntimeError(f"worker answered someone else's ping: {answer}")
    return answer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True, help="the health endpoint to poll")
    parser.add_argument("--queue", default="celery", help="the queue the awaited worker reads")
    parser.add_argument(
        "--engine", action="append", default=[], help="an engine's base URL (repeatable)"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait in all")
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout
    try:
        health = wait_for_ok(args.url, deadline)
        print(f"health: {health}")
        worker = wait_for_worker(args.queue, deadline)
        print(f"worker: pid {worker['pid']} on {worker['hostname']} answered a ping")
        for engine in args.engine:
            wait_for_ok(f"{engine.rstrip('/')}/health", deadline)
            print(f"engine: {engine} healthy")
    except Exception as error:
        print(f"not ready: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
