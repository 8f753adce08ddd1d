"""Celery tasks. Each takes ids and plain values, never model objects."""

from __future__ import annotations

import os
import socket

from celery import Task

from workers.celery import app


@app.task(name="workers.ping")
def ping(token: str) -> dict[str, str | int]:
    """Answers with the token and who answered, so a caller sees a real worker took it."""
    return {"token": token, "hostname": socket.gethostname(), "pid": os.getpid()}


@app.task(name="workers.run_execute", bind=True)
def run_execute(self: Task, run_id: int) -> str:
    """Host a run until it ends or is handed back. Idempotent: a second delivery while a live
    host holds the run's lease, or after the run ended, returns at once. The message is
    acknowledged on receipt: a run whose worker dies is queued again by the lease's sweep."""
    from controlplane.runs.queue import enqueue
    from workers.runtime.host import SHUTDOWN, host_run

    if SHUTDOWN.is_set():  # a worker shutting down hands runs on; it takes none
        enqueue(run_id)
        return f"run {run_id}: this worker is shutting down; the task is sent again"
    return host_run(run_id, owner=f"{self.request.hostname}/{self.request.id}")


@app.task(name="workers.deliver_alert")
def deliver_alert(delivery_id: int) -> str:
    """One attempt at a notification's delivery; the alerts watch sends the next if due."""
    from controlplane.alerts.delivery import deliver

    return deliver(delivery_id)
