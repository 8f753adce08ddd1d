"""Alert rules through the API and the ``pacer`` client: made, listed, refused when wrong,
written by operators only; deliveries listed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from rest_framework.test import APIClient

from controlplane.alerts.models import AlertEpisode, AlertRule, Delivery
from tests.api.conftest import LiveServer, make_account, make_run
from tests.api.test_cli import pacer

pytestmark = pytest.mark.django_db


def client(role: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {make_account(role, role).token}")
    return api


def test_a_rule_is_made_with_the_defaults_and_every_kind() -> None:
    api = client("operator")
    answer = api.post("/api/alerts/rules/", {"name": "on-call", "url": "https://hooks.example/x"})
    assert answer.status_code == 201, answer.content
    rule = answer.json()
    assert rule["kinds"] == [
        "preemption_storm", "engine_down", "pin_expiring", "run_failed", "run_completed",
        "run_idle", "reconcile",
    ]  # fmt: skip
    assert (rule["engine_down_s"], rule["storm_polls"], rule["run"]) == (60.0, 3, None)
    assert rule["created_by"] == "operator" and rule["body_format"] == "json"
    assert [r["id"] for r in api.get("/api/alerts/rules/").json()] == [rule["id"]]
    changed = api.patch(f"/api/alerts/rules/{rule['id']}/", {"enabled": False}, format="json")
    assert changed.status_code == 200 and changed.json()["enabled"] is False
    assert api.delete(f"/api/alerts/rules/{rule['id']}/").status_code == 204
    assert not AlertRule.objects.exists()


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"url": "ftp://hooks.example/x"}, "url", "http or https URL with a host"),
        ({"url": "https://user:secret@hooks.example/x"}, "url", "user info"),
        ({"url": "not a url"}, "url", "http or https URL with a host"),
        ({"url": "http://hooks:99999/x"}, "url", "port is not a number"),
        ({"kinds": ["engine_on_fire"]}, "kinds", "not a valid choice"),
        ({"kinds": []}, "kinds", "may not be empty"),
        ({"run": 999_999}, "run", "does not exist"),
        ({"storm_polls": 0}, "storm_polls", "greater than or equal to 1"),
        ({"engine_down_s": -1}, "engine_down_s", "greater than or equal to 0"),
        ({"body_format": "xml"}, "body_format", "not a valid choice"),
    ],
)
def test_a_wrong_rule_is_a_400_naming_the_field(body: dict, field: str, message: str) -> None:
    api = client("operator")
    answer = api.post(
        "/api/alerts/rules/",
        {"name": "x", "url": "https://hooks.example/x", **body},
        format="json",
    )
    assert answer.status_code == 400, answer.content
    errors = answer.json()["errors"]
    found = [text for path, texts in errors.items() if path.startswith(field) for text in texts]
    assert any(message in text for text in found), errors
    assert not AlertRule.objects.exists()


def test_a_receiver_named_by_one_label_as_on_a_compose_network_is_taken() -> None:
    answer = client("operator").post(
        "/api/alerts/rules/", {"name": "compose", "url": "http://receiver:9000/hook"}
    )
    assert answer.status_code == 201, answer.content


def test_viewers_read_rules_and_deliveries_but_write_none() -> None:
    AlertRule.objects.create(name="r", url="https://hooks.example/x")
    api = client("viewer")
    assert api.get("/api/alerts/rules/").status_code == 200
    assert api.get("/api/alerts/deliveries/").status_code == 200
    answer = api.post("/api/alerts/rules/", {"name": "x", "url": "https://hooks.example/y"})
    assert answer.status_code == 403
    assert APIClient().get("/api/alerts/rules/").status_code == 401
    assert client("operator").get("/api/alerts/deliveries/", {"rule": "x"}).status_code == 400


@pytest.mark.django_db(transaction=True)
def test_the_cli_adds_lists_and_removes_rules_and_shows_deliveries(
    live_server_api: LiveServer,
) -> None:
    token = make_account("olga", "operator").token
    code, out, err = pacer(
        live_server_api, token, "alerts", "add", "on-call", "https://hooks.example/T/B/X",
        "--format", "slack", "--kind", "engine_down", "--kind", "run_failed",
        "--engine-down-s", "90s",
    )  # fmt: skip
    assert code == 0, err
    rule = AlertRule.objects.get()
    assert out == f"alert rule {rule.pk} (on-call): engine_down, run_failed\n"
    assert (rule.body_format, rule.engine_down_s) == ("slack", 90.0)
    code, out, _ = pacer(live_server_api, token, "alerts", "list")
    header, row = out.splitlines()
    assert header.split() == ["ID", "NAME", "FORMAT", "RUNS", "ENABLED", "KINDS", "URL"]
    assert row.split()[:6] == [
        str(rule.pk),
        "on-call",
        "slack",
        "all",
        "on",
        "engine_down,run_failed",
    ]
    run = make_run(name="watched")
    episode = AlertEpisode.objects.create(
        rule=rule, run=run, kind="run_failed", summary="run failed", opened_at=datetime.now(UTC)
    )
    Delivery.objects.create(
        episode=episode, event="fired", url=rule.url, body={"text": "x"},
        next_attempt_at=datetime.now(UTC), attempts=2, state="delivered", answer="200 OK",
    )  # fmt: skip
    code, out, _ = pacer(live_server_api, token, "alerts", "deliveries", "--run", str(run.pk))
    assert out.splitlines()[1].split()[2:] == [
        str(rule.pk), str(run.pk), "run_failed", "fired", "delivered", "2", "200", "OK"
    ]  # fmt: skip
    code, _, err = pacer(live_server_api, token, "alerts", "add", "x", "https://h.example/",
                         "--idle-s", "soon")  # fmt: skip
    assert code == 2 and "--idle-s: 'soon' is not a duration" in err
    code, out, _ = pacer(live_server_api, token, "alerts", "remove", str(rule.pk))
    assert code == 0 and out == f"alert rule {rule.pk} removed\n"
    assert not AlertRule.objects.exists()
