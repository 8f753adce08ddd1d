"""A task crosses the real Redis broker to a real worker process and its result comes back."""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import Worker
from workers.tasks import ping

pytestmark = pytest.mark.integration


def test_ping_goes_through_redis_to_a_worker_process_and_back(
    celery_worker: Worker, celery_queue: str
) -> None:
    token = uuid.uuid4().hex

    result = ping.apply_async(args=[token], queue=celery_queue)
    answer = result.get(timeout=30)

    assert answer["token"] == token
    assert answer["pid"] != os.getpid()
    assert celery_worker.process.poll() is None
    # The worker logs in Pacer's format, run id included: Celery must not replace the handlers.
    deadline = time.monotonic() + 10
    while not (line := logged(celery_worker.log_path, f"[{result.id}] succeeded")):
        assert time.monotonic() < deadline, celery_worker.log_path.read_text()[-2000:]
        time.sleep(0.1)
    assert re.match(r"\d{4}-\d\d-\d\d [\d:,]+ INFO celery\S* run=- Task workers\.ping", line), line


def logged(path: Path, text: str) -> str | None:
    """The first line of the log at ``path`` that contains ``text``."""
    return next((line for line in path.read_text().splitlines() if text in line), None)
