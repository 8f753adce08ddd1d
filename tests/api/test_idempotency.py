"""Creating a run with an ``Idempotency-Key``: a retry of the same create answers with the
first create's run (201, ``Idempotent-Replayed: true``) and stores nothing; the key with
another body is a 422; a malformed key a 400; keys are each user's own."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from rest_framework.test import APIClient

from controlplane.runs.models import Run, RunState
from tests.api.conftest import Account, config_document, make_account
from tests.integration.hosting import SimEngine

pytestmark = pytest.mark.django_db

KEY = "7f1c9a52-3c1e-4a4b-9d5e-0b8f1f6f2a10"


def create(client: APIClient, document: dict, key: str) -> object:
    return client.post("/api/runs/", document, format="json", headers={"Idempotency-Key": key})


def test_a_retried_create_answers_with_the_first_run_and_stores_no_second(
    operator_client: APIClient, sim_engine: SimEngine
) -> None:
    document = config_document(sim_engine.url)
    first = create(operator_client, document, KEY)
    again = create(operator_client, document, KEY)
    assert first.status_code == again.status_code == 201, again.json()
    assert again.json()["id"] == first.json()["id"]
    assert again["Location"] == first["Location"]
    assert again["Idempotent-Replayed"] == "true"
    assert not first.has_header("Idempotent-Replayed")
    assert Run.objects.get().idempotency_key == KEY


def test_the_key_with_another_body_is_a_422_and_stores_nothing(
    operator_client: APIClient, sim_engine: SimEngine
) -> None:
    document = config_document(sim_engine.url)
    first = create(operator_client, document, KEY)
    other = create(operator_client, {**document, "max_steps": 7}, KEY)
    assert other.status_code == 422, other.json()
    assert str(first.json()["id"]) in other.json()["detail"]
    assert Run.objects.count() == 1


@pytest.mark.parametrize("key", ["", "two words", "x" * 256, "clé"])
def test_a_malformed_key_is_a_400_at_the_header(operator_client: APIClient, key: str) -> None:
    response = create(operator_client, {"name": "r"}, key)
    assert response.status_code == 400, response.json()
    assert list(response.json()["errors"]) == ["Idempotency-Key"]
    assert not Run.objects.exists()


def test_keys_are_each_users_own(
    operator_client: APIClient, admin: Account, sim_engine: SimEngine
) -> None:
    document = config_document(sim_engine.url)
    mine = create(operator_client, document, KEY)
    theirs = create(admin.client(), document, KEY)
    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"]
    assert not theirs.has_header("Idempotent-Replayed")


def test_a_replay_asks_no_engine(operator: Account) -> None:
    """The first create was answered; its engines may be away by the time a retry comes."""
    document = {"name": "r", "engine": [{"url": "http://127.0.0.1:9/v1"}]}
    run = Run.objects.create(
        name="r", config=document, created_by=operator.user, idempotency_key=KEY
    )
    again = create(operator.client(), document, KEY)
    assert again.status_code == 201, again.json()
    assert (again.json()["id"], again["Idempotent-Replayed"]) == (run.pk, "true")


@pytest.mark.django_db(transaction=True)
def test_creates_with_one_key_at_once_store_one_run(
    sim_engine: SimEngine, private_queue: str
) -> None:
    token = make_account("olga", "operator")
    document = config_document(sim_engine.url)
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: create(token.client(), document, KEY), range(4)))
    assert [a.status_code for a in answers] == [201] * 4
    assert len({a.json()["id"] for a in answers}) == 1
    assert sum(a.has_header("Idempotent-Replayed") for a in answers) == 3
    assert Run.objects.get().state == RunState.QUEUED
