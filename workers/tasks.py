"""Celery tasks. Each takes ids and plain values, never model objects."""

from __future__ import annotations

import os
import socket

from workers.celery import app


@app.task(name="workers.ping")
def ping(token: str) -> dict[str, str | int]:
    """Answers with the token and who answered, so a caller sees a real worker took it."""
    return {"token": token, "hostname": socket.gethostname(), "pid": os.getpid()}
