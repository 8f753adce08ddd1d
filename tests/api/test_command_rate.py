"""The rate limit on operator commands as the served stack keeps it: one count in Redis for
every web process, exact however many commands arrive at once."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from controlplane.runs.models import Override, Run, RunState
from tests.api.conftest import daphne_server, make_account, make_run

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
