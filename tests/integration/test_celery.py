"""A task crosses the real Redis broker to a real worker process and its result comes back."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from workers.tasks import ping

pytestmark = pytest.mark.integration


def test_ping_goes_through_redis_to_a_worker_process_and_back(
    celery_worker_process: subprocess.Popen[bytes], celery_queue: str
) -> None:
    token = uuid.uuid4().hex

    answer = ping.apply_async(args=[token], queue=celery_queue).get(timeout=30)

    assert answer["token"] == token
    assert answer["pid"] != os.getpid()
    assert celery_worker_process.poll() is None
