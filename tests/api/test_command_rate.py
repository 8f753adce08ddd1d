"""The rate limit on operator commands as the served stack keeps it: one count in Redis for
every web process, exact however many commands arrive at once, and a command let through
(and said so in the log) while Redis cannot count it."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from controlplane.runs.models import Override, Run, RunState
from tests.api.conftest import LiveServer, daphne_server, make_account, make_run
from tests.conftest import free_port
from tests.faults.conftest import OwnRedis
from tests.integration.hosting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LIMIT = 10
SENT = 40


def queued_run() -> Run:
    """A run with no worker yet: commands to it are stored and need nothing else."""
    return make_run(state=RunState.QUEUED, config={"name": "r"})


def test_forty_commands_at_once_across_two_web_processes_let_exactly_ten_through(
    tmp_path: Path, module_queue: str
) -> None:
    token = make_account("olga", "operator").token
    run = queued_run()
    shared = {"PACER_OVERRIDE_RATE": f"{LIMIT}/minute", "PACER_THROTTLE_PREFIX": uuid.uuid4().hex}
    with (
        daphne_server(tmp_path, module_queue, tmp_path / "runs", **shared) as first,
        daphne_server(tmp_path, module_queue, tmp_path / "runs", **shared) as second,
    ):
        servers = [first, second]
        clients = [
            httpx.Client(base_url=s.url, headers={"Authorization": f"Token {token}"}, timeout=30)
            for s in servers
        ]
        for client in clients:  # connections open and the servers warm: the race is the POSTs
            assert client.get(f"/api/runs/{run.pk}/").status_code == 200
        start = threading.Barrier(SENT)

        def send(n: int) -> int:
            start.wait()
            body = {"mode": "set", "cap": 8, "reason": f"burst {n}"}
            return clients[n % 2].post(f"/api/runs/{run.pk}/override/", json=body).status_code

        with ThreadPoolExecutor(SENT) as pool:
            answers = Counter(pool.map(send, range(SENT)))
    assert answers == {202: LIMIT, 429: SENT - LIMIT}, answers
    assert Override.objects.filter(run=run).count() == LIMIT


def test_commands_go_through_while_redis_cannot_count_them(
    tmp_path: Path, module_queue: str
) -> None:
    token = make_account("olga", "operator").token
    run = queued_run()
    redis_server = OwnRedis(free_port(), tmp_path)
    redis_server.start()
    try:
        with daphne_server(
            tmp_path, module_queue, tmp_path / "runs", REDIS_URL=redis_server.url
        ) as server:
            redis_server.stop()
            api = httpx.Client(
                base_url=server.url, headers={"Authorization": f"Token {token}"}, timeout=30
            )
            pin = {"mode": "pin", "cap": 8, "ttl_s": 60, "reason": "during the outage"}
            pinned = api.post(f"/api/runs/{run.pk}/override/", json=pin)
            paused = api.post(f"/api/runs/{run.pk}/pause/", json={"reason": "outage"})
            log = wait_for(lambda: _counted_nothing(server), 10, "the log line")
    finally:
        redis_server.stop()
    assert pinned.status_code == 202, pinned.text
    assert paused.status_code == 202, paused.text
    assert Override.objects.filter(run=run).count() == 2
    run.refresh_from_db()
    assert run.state == RunState.PAUSED
    assert "could not count" in log


def _counted_nothing(server: LiveServer) -> str | None:
    log = server.log()
    return log if "could not count" in log else None
