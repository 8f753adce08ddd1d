"""Users of each role with their tokens, API clients for them, and a private rate-limit
store, for the API's tests on PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from controlplane.runs.models import Decision, Run, RunState
from controlplane.runs.roles import grant
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
    caches = dict(settings.CACHES)
    caches["throttle"] = {**caches["throttle"], "KEY_PREFIX": f"pacer-test-{uuid.uuid4().hex}"}
    settings.CACHES = caches


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
def private_queue() -> Iterator[str]:
    """Run tasks sent during the test go to a queue nobody else consumes, deleted after."""
    name = f"pacer-api-{uuid.uuid4().hex[:8]}"
    before = app.conf.task_default_queue
    app.conf.task_default_queue = name
    yield name
    app.conf.task_default_queue = before
    with app.connection_for_write() as connection:
        connection.default_channel.client.delete(name)


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
