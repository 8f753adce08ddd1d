"""Runs through the API: created from JSON or TOML and checked by the runtime's schema and
against real engines; listed with filters and cursor pages; shown; stopped, paused, resumed."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.runs.models import Override, Run, RunState
from tests.api.conftest import config_document, config_toml, make_run
from tests.integration.hosting import SimEngine

pytestmark = pytest.mark.django_db


def test_a_json_config_creates_a_queued_run_owned_by_its_creator(
    operator_client: APIClient, operator: object, sim_engine: SimEngine
) -> None:
    document = config_document(sim_engine.url)
    response = operator_client.post("/api/runs/", document, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    run = Run.objects.get(pk=body["id"])
    assert response["Location"] == body["url"] == f"http://testserver/api/runs/{run.pk}/"
    assert (run.state, run.name, run.config) == (RunState.QUEUED, "api-run", document)
    assert run.created_by == operator.user  # type: ignore[attr-defined]
    assert body["created_by"] == "olga" and body["config"] == document
    assert body["links"]["decisions"].endswith(f"/api/runs/{run.pk}/decisions/")


def test_a_toml_body_creates_the_same_run(
    operator_client: APIClient, sim_engine: SimEngine
) -> None:
    response = operator_client.post(
        "/api/runs/", config_toml(sim_engine.url), content_type="application/toml"
    )
    assert response.status_code == 201, response.json()
    run = Run.objects.get(pk=response.json()["id"])
    assert run.name == "api-toml"
    assert run.config["concurrency"]["pacing"] == {"window": 0.5}
    assert run.config["engine"] == [{"url": sim_engine.url}]


def test_a_toml_body_that_does_not_parse_is_a_400_saying_where(
    operator_client: APIClient,
) -> None:
    response = operator_client.post(
        "/api/runs/", 'name = "x"\nbatch_size = = 3\n', content_type="application/toml"
    )
    assert response.status_code == 400
    body = response.json()
    assert body["detail"].startswith("the TOML does not parse")
    assert "line 2" in body["errors"]["body"][0]
    assert not Run.objects.exists()


def test_config_errors_are_field_errors_all_at_once(operator_client: APIClient) -> None:
    document = {
        "name": "bad",
        "batch_size": "64",
        "group_size": 0,
        "concurrency": {"policy": "greedy", "pacer": {"trim_kv_usage": 7}},
        "env": [{"name": "nope"}],
        "colour": "blue",
    }
    response = operator_client.post("/api/runs/", document, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert errors["batch_size"] == ["must be an integer, got '64'"]
    assert errors["group_size"] == ["must be >= 1, got 0"]
    assert "greedy" in errors["concurrency.policy"][0]
    assert "env[0].name" in errors
    assert errors["colour"][0].startswith("unknown key")
    assert errors["engine"] == ["at least one [[engine]] is required"]
    assert not Run.objects.exists()


def test_an_engine_that_does_not_answer_is_a_field_error_at_its_url(
    operator_client: APIClient,
) -> None:
    document = config_document("http://127.0.0.1:9")  # nothing listens on the discard port
    response = operator_client.post("/api/runs/", document, format="json")
    assert response.status_code == 400
    assert "did not answer with a list of models" in response.json()["errors"]["engine[0].url"][0]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"name": "x\\u0000y"}', "name"),
        ('{"name": "x", "env": [{"args": {"s": "\\ud800"}}]}', "env[0].args.s"),
        ('{"name": "x", "seed": 1e400}', "seed"),
        ('{"name": "x", "env": ' + "[" * 40 + "]" * 40 + "}", "env" + "[0]" * 32),
        ("[" * 100_000 + "]" * 100_000, "body"),
    ],
)
def test_what_the_database_cannot_store_is_a_400_not_a_500(
    operator_client: APIClient, body: str, field: str
) -> None:
    response = operator_client.post("/api/runs/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
    assert not Run.objects.exists()


def test_json_that_does_not_parse_or_is_not_an_object_is_a_400(
    operator_client: APIClient,
) -> None:
    broken = operator_client.post("/api/runs/", '{"name": ', content_type="application/json")
    assert broken.status_code == 400
    assert broken.json()["detail"].startswith("the JSON does not parse")
    listed = operator_client.post("/api/runs/", "[1, 2]", content_type="application/json")
    assert listed.status_code == 400
    assert "must be a table (an object), got [1, 2]" in listed.json()["errors"]["config"]
    nan = operator_client.post("/api/runs/", '{"name": NaN}', content_type="application/json")
    assert nan.status_code == 400


def test_a_body_of_10_mb_is_413_with_a_json_error(operator_client: APIClient) -> None:
    body = json.dumps({"name": "x", "padding": "a" * (10 * 1024 * 1024)})
    response = operator_client.post("/api/runs/", body, content_type="application/json")
    assert response.status_code == 413
    assert response.json() == {"detail": "the body is larger than 1048576 bytes"}
    assert not Run.objects.exists()


def test_runs_are_listed_newest_first_with_filters_and_cursor_pages(
    viewer_client: APIClient,
) -> None:
    made = [make_run(name=f"sweep-{i}", state=RunState.COMPLETED) for i in range(7)]
    paused = make_run(name="other", state=RunState.PAUSED)
    first = viewer_client.get("/api/runs/", {"page_size": 3})
    assert first.status_code == 200
    page = first.json()
    assert [r["id"] for r in page["results"]] == [paused.pk, made[6].pk, made[5].pk]
    assert page["previous"] is None
    ids = [r["id"] for r in page["results"]]
    while page["next"]:
        page = viewer_client.get(page["next"]).json()
        ids += [r["id"] for r in page["results"]]
    assert ids == [paused.pk, *[r.pk for r in reversed(made)]]

    def names(**params: object) -> list[str]:
        response = viewer_client.get("/api/runs/", params)
        assert response.status_code == 200, response.json()
        return [r["name"] for r in response.json()["results"]]

    assert names(state="paused") == ["other"]
    assert names(state="paused,completed")[0] == "other"
    assert names(name="SWEEP-3") == ["sweep-3"]
    Run.objects.filter(pk=made[0].pk).update(created_at=timezone.now() - timedelta(days=2))
    cutoff = (timezone.now() - timedelta(days=1)).isoformat()
    assert "sweep-0" not in names(created_after=cutoff) and len(names(created_after=cutoff)) == 7
    assert names(created_before=cutoff) == ["sweep-0"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"state": "running,flying"}, "state"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"name": "a\x00b"}, "name"),
    ],
)
def test_bad_filters_are_field_errors(
    viewer_client: APIClient, params: dict[str, str], field: str
) -> None:
    response = viewer_client.get("/api/runs/", params)
    assert response.status_code == 400
    assert field in response.json()["errors"]


def test_a_bad_cursor_is_a_404_and_an_unknown_run_too(viewer_client: APIClient) -> None:
    assert viewer_client.get("/api/runs/", {"cursor": "bogus"}).status_code == 404
    assert viewer_client.get("/api/runs/999999/").json() == {"detail": "not found"}


def test_the_detail_shows_live_figures_and_the_policy_cap_only_while_pinned(
    viewer_client: APIClient,
) -> None:
    run = make_run(
        cap=64, policy_cap=64, inflight_train=60, inflight_eval=4, step=3, policy_version=2,
        model_name="sim-model", output_dir="/tmp/out", lease_owner="w1/abc", error="",
    )  # fmt: skip
    body = viewer_client.get(f"/api/runs/{run.pk}/").json()
    assert (body["cap"], body["policy_cap"]) == (64, None)
    assert (body["inflight_train"], body["inflight_eval"], body["step"]) == (60, 4, 3)
    assert (body["model"], body["output_dir"], body["host"]) == ("sim-model", "/tmp/out", "w1/abc")
    Run.objects.filter(pk=run.pk).update(cap=16)
    assert viewer_client.get(f"/api/runs/{run.pk}/").json()["policy_cap"] == 64


def test_stop_of_a_queued_run_cancels_it_at_once(operator_client: APIClient) -> None:
    run = make_run(state=RunState.QUEUED)
    response = operator_client.post(f"/api/runs/{run.pk}/stop/", {"reason": "wrong config"})
    assert response.status_code == 202
    body = response.json()
    assert (body["mode"], body["status"], body["reason"]) == ("stop", "applied", "wrong config")
    run.refresh_from_db()
    assert run.state == RunState.CANCELLED
    assert run.error == "stopped by an operator before it ran: wrong config"


def test_stop_of_a_running_run_is_pending_until_its_worker_acts(
    operator_client: APIClient,
) -> None:
    run = make_run(state=RunState.RUNNING)
    response = operator_client.post(f"/api/runs/{run.pk}/stop/", {})
    assert response.status_code == 202 and response.json()["status"] == "pending"
    assert response["Location"] == response.json()["url"]
    assert Run.objects.get(pk=run.pk).state == RunState.STOPPING


def test_pause_and_resume_of_a_run_without_a_worker(
    operator_client: APIClient, private_queue: str
) -> None:
    run = make_run(state=RunState.QUEUED)
    assert operator_client.post(f"/api/runs/{run.pk}/pause/", {}).status_code == 202
    assert Run.objects.get(pk=run.pk).state == RunState.PAUSED
    again = operator_client.post(f"/api/runs/{run.pk}/pause/", {})
    assert again.status_code == 409
    assert again.json() == {"detail": f"run {run.pk} is paused already"}
    assert operator_client.post(f"/api/runs/{run.pk}/resume/", {}).status_code == 202
    assert Run.objects.get(pk=run.pk).state == RunState.QUEUED
    not_paused = operator_client.post(f"/api/runs/{run.pk}/resume/", {})
    assert not_paused.status_code == 409
    assert "not paused" in not_paused.json()["detail"]


@pytest.mark.parametrize("command", ["stop", "pause", "resume", "override"])
def test_commands_to_an_ended_run_are_409(operator_client: APIClient, command: str) -> None:
    run = make_run(state=RunState.COMPLETED)
    body = {"mode": "set", "cap": 8} if command == "override" else {}
    response = operator_client.post(f"/api/runs/{run.pk}/{command}/", body)
    assert response.status_code == 409
    assert response.json() == {
        "detail": f"run {run.pk} has ended (completed); it takes no commands"
    }
    assert not Override.objects.exists()


def test_a_command_reason_longer_than_500_is_a_field_error(operator_client: APIClient) -> None:
    run = make_run()
    response = operator_client.post(f"/api/runs/{run.pk}/stop/", {"reason": "x" * 501})
    assert response.status_code == 400 and "reason" in response.json()["errors"]
