"""Celery tasks. Each takes ids and plain values, never model objects."""

from __future__ import annotations

import os
import socket

from celery import Task
from celery.exceptions import Reject

from workers.celery import app


@app.task(name="workers.ping")
def ping(token: str) -> dict[str, str | int]:
    """Answers with the token and who answered, so a caller sees a real worker took it."""
    return {"token": token, "hostname": socket.gethostname(), "pid": os.getpid()}


@app.task(name="workers.run_execute", bind=True, acks_late=True, reject_on_worker_lost=True)
def run_execute(self: Task, run_id: int) -> str:
    """Host a run until it ends or is handed back. Idempotent: a second delivery while a live
    host holds the run's lease, or after the run ended, returns at once."""
    from workers.runtime.host import SHUTDOWN, host_run

    if SHUTDOWN.is_set():  # a worker shutting down hands runs on, it takes none
        raise Reject(f"run {run_id}: this worker is shutting down", requeue=True)
    return host_run(run_id, owner=f"{self.request.hostname}/{self.request.id}")
