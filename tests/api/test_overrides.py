"""Cap overrides: stored with who, when and why, answered 202 with a URL to poll, refused
field by field when malformed, 409 on an ended run, and rate-limited per user."""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.runs.models import Override, Run, RunState
from tests.api.conftest import Account, make_decisions, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def run() -> Run:
    return make_run(config={"name": "r", "concurrency": {"min_inflight": 4, "max_inflight": 256}})


def test_a_pin_is_stored_and_answered_202_pending_with_a_url_to_poll(
    operator_client: APIClient, operator: Account, run: Run
) -> None:
    body = {"mode": "pin", "cap": 64, "ttl_s": 600, "reason": "KV tests"}
    response = operator_client.post(f"/api/runs/{run.pk}/override/", body)
    assert response.status_code == 202
    answer = response.json()
    override = Override.objects.get()
    assert (override.mode, override.cap, override.ttl_s, override.reason) == (
        "pin", 64, 600.0, "KV tests",
    )  # fmt: skip
    assert override.created_by == operator.user
    assert answer["status"] == "pending" and answer["decision"] is None
    assert answer["url"] == f"http://testserver/api/runs/{run.pk}/overrides/{override.pk}/"
    assert response["Location"] == answer["url"]
    polled = operator_client.get(answer["url"]).json()
    assert polled == answer


def test_the_override_shows_applied_with_its_decision_or_error(
    viewer_client: APIClient, run: Run
) -> None:
    applied = Override.objects.create(run=run, mode="pin", cap=32, ttl_s=60.0)
    refused = Override.objects.create(run=run, mode="set", cap=300)
    decision = make_decisions(run, 1, kind="pin")[0]
    Override.objects.filter(pk=applied.pk).update(applied_at=timezone.now(), decision=decision)
    Override.objects.filter(pk=refused.pk).update(error="cap 300 is above max_inflight 256")

    listed = viewer_client.get(f"/api/runs/{run.pk}/overrides/").json()["results"]
    assert [(o["id"], o["status"]) for o in listed] == [
        (applied.pk, "applied"),
        (refused.pk, "error"),
    ]
    assert listed[0]["decision_id"] == decision.pk
    assert (
        listed[0]["decision"]["kind"] == "pin" and listed[0]["decision"]["override"] == applied.pk
    )
    assert listed[1]["error"] == "cap 300 is above max_inflight 256"
    decisions = viewer_client.get(f"/api/runs/{run.pk}/decisions/").json()["results"]
    assert decisions[0]["override"] == applied.pk


def test_an_override_of_another_run_is_not_found(viewer_client: APIClient, run: Run) -> None:
    other = make_run()
    override = Override.objects.create(run=other, mode="release")
    assert viewer_client.get(f"/api/runs/{run.pk}/overrides/{override.pk}/").status_code == 404


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({}, {"mode": ["This field is required."]}),
        ({"mode": "grow"}, {"mode": ['"grow" is not a valid choice.']}),
        ({"mode": "stop"}, {"mode": ['"stop" is not a valid choice.']}),
        ({"mode": "pin", "cap": "many", "ttl_s": 5}, {"cap": ["A valid integer is required."]}),
        ({"mode": "pin", "cap": [64], "ttl_s": 5}, {"cap": ["A valid integer is required."]}),
        ({"mode": "set", "cap": -5}, {"cap": ["Ensure this value is greater than or equal to 1."]}),
        (
            {"mode": "set", "cap": 10**12},
            {"cap": ["Ensure this value is less than or equal to 1000000."]},
        ),
        (
            {"mode": "set", "cap": 1000},
            {"cap": ["must be within this run's min_inflight..max_inflight [4, 256], got 1000"]},
        ),
        (
            {"mode": "pin", "cap": 64, "ttl_s": 0},
            {"ttl_s": ["Ensure this value is greater than or equal to 0.001."]},
        ),
        (
            {"mode": "pin", "cap": 64, "ttl_s": 365 * 86400},
            {"ttl_s": ["Ensure this value is less than or equal to 604800.0."]},
        ),
        ({"mode": "pin", "cap": 64, "ttl_s": "soon"}, {"ttl_s": ["A valid number is required."]}),
        ({"mode": "pin", "cap": 64}, {"ttl_s": ["a pin needs ttl_s"]}),
        ({"mode": "pin", "ttl_s": 5}, {"cap": ["a pin needs a cap"]}),
        ({"mode": "set", "cap": 8, "ttl_s": 5}, {"ttl_s": ["only a pin takes ttl_s"]}),
        ({"mode": "release", "cap": 8}, {"cap": ["a release takes no cap"]}),
        (
            {"mode": "release", "reason": "r" * 501},
            {"reason": ["Ensure this field has no more than 500 characters."]},
        ),
        ({"mode": "release", "reason": 5}, None),  # a number is read as text: accepted
    ],
)
def test_bad_override_bodies_are_400_with_field_errors(
    operator_client: APIClient, run: Run, body: dict, errors: dict | None
) -> None:
    response = operator_client.post(f"/api/runs/{run.pk}/override/", body)
    if errors is None:
        assert response.status_code == 202
        return
    assert response.status_code == 400, response.json()
    assert response.json() == {"detail": "the request is invalid", "errors": errors}
    assert not Override.objects.exists()


def test_a_body_that_is_not_an_object_is_a_400(operator_client: APIClient, run: Run) -> None:
    for text in ("[1]", '"pin"', "null"):
        response = operator_client.post(
            f"/api/runs/{run.pk}/override/", text, content_type="application/json"
        )
        assert response.status_code == 400, (text, response.content)
        assert "body" in response.json()["errors"]


def test_an_override_on_a_finished_run_is_409(operator_client: APIClient) -> None:
    run = make_run(state=RunState.CANCELLED)
    response = operator_client.post(f"/api/runs/{run.pk}/override/", {"mode": "release"})
    assert response.status_code == 409


def test_commands_beyond_the_rate_limit_are_429_saying_when_to_retry(
    operator_client: APIClient, viewer_client: APIClient, run: Run, settings: object
) -> None:
    from controlplane.runs.api.throttles import CommandRateThrottle

    CommandRateThrottle.THROTTLE_RATES = {"override": "3/minute"}
    try:
        for _ in range(3):
            ok = operator_client.post(f"/api/runs/{run.pk}/override/", {"mode": "release"})
            assert ok.status_code == 202
        limited = operator_client.post(f"/api/runs/{run.pk}/override/", {"mode": "release"})
        stop = operator_client.post(f"/api/runs/{run.pk}/stop/", {})
    finally:
        del CommandRateThrottle.THROTTLE_RATES
    assert limited.status_code == 429 and stop.status_code == 429
    retry = int(limited["Retry-After"])
    assert 0 < retry <= 60
    assert limited.json() == {
        "detail": f"too many commands: try again in {retry} s",
        "retry_after_s": retry,
    }
    assert Override.objects.count() == 3
    assert viewer_client.get(f"/api/runs/{run.pk}/").status_code == 200  # reads are not limited


def test_the_default_rate_is_a_named_setting(settings: object) -> None:
    from rest_framework.settings import api_settings

    assert api_settings.DEFAULT_THROTTLE_RATES == {"override": "60/minute"}
