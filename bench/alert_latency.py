"""From a condition to its webhook: how long after a run ends its notification arrives.

    python -m bench.alert_latency [--runs 12]

Starts a whole stack in processes (bench.stack) and an alerts worker beside it, makes a rule
through the API that tells a receiver in this process of runs completing, creates short
runs, and times each run's stored end (``finished_at``) to the receiver's receipt of its
notification. The alerts watch looks every ``PACER_ALERTS_EVERY_S`` (5 s), so the figure is
that period at most, plus a delivery. Needs PostgreSQL at DATABASE_URL and Redis at REDIS_URL.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from bench.stack import BIN, Stack, pacer_stack, wait_until


class Receipts:
    """A webhook receiver in this process: each run's notification and when it came."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}
        self._lock = threading.Lock()
        receipts = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receipts._lock:
                    receipts.at.setdefault(body["run"]["id"], time.time())
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def short_run(stack: Stack, index: int) -> dict[str, object]:
    return {
        "name": f"alerted-{index}",
        "batch_size": 8,
        "group_size": 4,
        "max_steps": 1 + index % 3,  # runs end at different moments, not in lockstep
        "concurrency": {"policy": "pacer", "max_inflight": 32, "poll_interval_s": 1.0},
        "env": [{"name": "arithmetic", "sampling": {"max_tokens": 16}}],
        "engine": [{"url": url} for url in stack.engine_urls],
        "wandb": {"mode": "disabled"},
    }


def measure(runs: int) -> list[float]:
    queue = f"pacer-bench-alerts-{uuid.uuid4().hex[:8]}"
    receipts = Receipts()
    with pacer_stack(worker_concurrency=4, PACER_ALERTS_QUEUE=queue) as stack:
        stack.start(
            "alerts", str(BIN / "celery"), "-A", "workers.celery", "worker", "-Q", queue,
            "-n", f"{queue}@%h", "--concurrency", "4", "-l", "WARNING",
        )  # fmt: skip
        api = httpx.Client(
            base_url=stack.web_url, headers={"Authorization": f"Token {stack.token}"}, timeout=30
        )
        rule = {"name": "bench", "url": receipts.url, "kinds": ["run_completed"]}
        assert api.post("/api/alerts/rules/", json=rule).status_code == 201
        ids = []
        for index in range(runs):
            answer = api.post("/api/runs/", json=short_run(stack, index))
            assert answer.status_code == 201, answer.text
            ids.append(answer.json()["id"])
        wait_until(lambda: len(receipts.at) >= runs, "every run's notification", timeout=600)
        latencies = []
        for run_id in ids:
            run = api.get(f"/api/runs/{run_id}/").json()
            assert run["state"] == "completed", run
            ended = datetime.fromisoformat(run["finished_at"].replace("Z", "+00:00"))
            latencies.append(receipts.at[run_id] - ended.timestamp())
        receipts.server.shutdown()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=12)
    latencies = sorted(measure(parser.parse_args().runs))
    p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
    print(
        f"run ended -> its webhook notification, {len(latencies)} runs: "
        f"median {statistics.median(latencies):.2f} s, p99 {p99:.2f} s, "
        f"min {latencies[0]:.2f} s (the watch looks every 5 s)"
    )


if __name__ == "__main__":
    main()
