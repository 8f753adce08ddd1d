"""Users of each role with their tokens, API clients for them, and a private rate-limit
store, for the API's tests on PostgreSQL."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from controlplane.runs.models import Decision, Run, RunState, StepRecord
from controlplane.runs.roles import grant
from tests.conftest import REPO_ROOT, VENV_BIN, free_port, stop_process_group
from tests.integration.hosting import (
    STARTUP_S,
    SimEngine,
    run_document,
    session_database_url,
    sim_engines,
    wait_for,
)
from workers.celery import app


@dataclass(frozen=True)
class Account:
    user: AbstractBaseUser
    token: str

    def client(self) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {self.token}")
        return client


def make_account(username: str, role: str | None, *, superuser: bool = False) -> Account:
    users = get_user_model().objects
    user = (
        users.create_superuser(username=username, password="pw")
        if superuser
        else users.create_user(username=username, password="pw")
    )
    if role is not None:
        grant(user, role)
    return Account(user, Token.objects.create(user=user).key)


@pytest.fixture(autouse=True)
def throttle_store(settings: Any) -> None:
    """Rate-limit counts under a prefix of this test's own: user ids restart with every test
    database, and a count left in the shared Redis by an earlier run must not leak in."""
    settings.PACER_THROTTLE_PREFIX = f"pacer-test-{uuid.uuid4().hex}"


@pytest.fixture
def operator(db: None) -> Account:
    return make_account("olga", "operator")


@pytest.fixture
def viewer(db: None) -> Account:
    return make_account("victor", "viewer")


@pytest.fixture
def admin(db: None) -> Account:
    return make_account("root", None, superuser=True)


@pytest.fixture
def operator_client(operator: Account) -> APIClient:
    return operator.client()


@pytest.fixture
def viewer_client(viewer: Account) -> APIClient:
    return viewer.client()


@pytest.fixture
def anonymous() -> APIClient:
    return APIClient()


@pytest.fixture
def private_queue(queue: str) -> Iterator[str]:
    """Run tasks sent during the test go to a queue nobody else consumes, deleted after."""
    yield queue
    with app.connection_for_write() as connection:
        connection.default_channel.client.delete(queue)


T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def make_run(state: str = RunState.RUNNING, **fields: Any) -> Run:
    config = fields.pop("config", {"name": "r", "concurrency": {"max_inflight": 256}})
    return Run.objects.create(name=fields.pop("name", "r"), config=config, state=state, **fields)


def make_decisions(run: Run, count: int, *, start: datetime = T0, kind: str = "grow") -> list:
    rows = [
        Decision(
            run=run,
            at=start + timedelta(seconds=i),
            step=i // 10,
            kind=kind,
            cause="clear",
            signal="clear",
            cap_before=10 + i,
            cap_after=11 + i,
            reason=f"Increased concurrency {10 + i} -> {11 + i} (clear)",
            figures={"kv_usage": 0.5},
        )
        for i in range(count)
    ]
    return Decision.objects.bulk_create(rows)


def make_step(run: Run, step: int, version: int = 0) -> StepRecord:
    return StepRecord.objects.create(
        run=run, step=step, started_at=T0, written_at=T0 + timedelta(seconds=step),
        seconds=1.5, policy_version=version, episodes=16, tokens=1000, reward_mean=0.25,
        reward_std=0.1, generated_tokens=900, finished_train=16, finished_eval=0, failed=0,
        cancelled=0, dropped_groups=0, cap=64, inflight=60, path=f"/tmp/steps/{step:06d}",
    )  # fmt: skip


@pytest.fixture(scope="session")
def sim_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimEngine]:
    """One simulated engine for the whole session: run creation asks engines to answer."""
    with sim_engines(tmp_path_factory.mktemp("api-sims"), 1) as started:
        yield started[0]


def config_document(engine_url: str, **top: Any) -> dict[str, Any]:
    """A valid config on ``engine_url``: the one hosted runs use, quick steps."""
    document = run_document([SimEngine(engine_url, None, None)], name="api-run")  # type: ignore[arg-type]
    document.update(top)
    return document


def config_toml(engine_url: str, name: str = "api-toml", max_steps: int = 5) -> str:
    return f"""\
name = "{name}"
batch_size = 16
group_size = 4
max_steps = {max_steps}

[concurrency]
policy = "pacer"
max_inflight = 128
poll_interval_s = 0.5
[concurrency.pacing]
window = 0.5

[[env]]
name = "multiturn"
args = {{ turns = 2, prompt_tokens = 64, observation_tokens = 32 }}
[env.sampling]
max_tokens = 32

[[engine]]
url = "{engine_url}"

[wandb]
mode = "disabled"
"""


@dataclass(frozen=True)
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def daphne_server(
    folder: Path, queue: str, runs_dir: Path, **env_overrides: str
) -> Iterator[LiveServer]:
    """The real ASGI server (HTTP and websockets) on the test database, sending run tasks to
    ``queue``; ``env_overrides`` (a rate, a Redis of the test's own) win over the defaults."""
    port = free_port()
    log_path = folder / f"daphne-{port}.log"
    env = {
        **os.environ,
        "DATABASE_URL": session_database_url(),
        "PACER_CELERY_QUEUE": queue,
        "PACER_RUNS_DIR": str(runs_dir),
        "PACER_THROTTLE_PREFIX": f"pacer-test-{uuid.uuid4().hex}",
        "DEBUG": "true",  # as scripts/run serves on loopback
        **env_overrides,
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                str(VENV_BIN / "daphne"),
                *("-b", "127.0.0.1", "-p", str(port)),
                "controlplane.asgi:application",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_for(lambda: _answers(server), STARTUP_S, "daphne")
        yield server
    finally:
        stop_process_group(process)


def _answers(server: LiveServer) -> bool:
    assert server.process.poll() is None, server.log()[-3000:]
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{server.url}/api/health/", timeout=2.0).status_code == 200
    return False


@pytest.fixture(scope="module")
def module_queue() -> Iterator[str]:
    """A queue of this module's own for the server it starts (and any worker)."""
    name = f"pacer-api-{uuid.uuid4().hex[:8]}"
    before = app.conf.task_default_queue
    app.conf.task_default_queue = name
    yield name
    app.conf.task_default_queue = before
    with app.connection_for_write() as connection:
        connection.default_channel.client.delete(name)


@pytest.fixture(scope="module")
def live_server_api(
    django_db_setup: None,
    django_db_blocker: Any,
    module_queue: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiveServer]:
    folder = tmp_path_factory.mktemp("live")
    with django_db_blocker.unblock(), daphne_server(folder, module_queue, folder / "runs") as s:
        yield s
