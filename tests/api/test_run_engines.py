"""A run's engines through the API and the ``pacer`` client: listed, added (checked as at
run creation, and asked whether it serves the run's model), removed (never the last),
refused in words when wrong, and written by operators only. A run without a worker takes
the change in its stored config at once; a hosted one is in tests/integration."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from rest_framework.test import APIClient

from controlplane.runs.models import Engine, Override, Run, RunState
from tests.api.conftest import LiveServer, config_document, make_account, make_run
from tests.api.test_cli import pacer
from tests.conftest import free_port
from tests.integration.hosting import SimEngine

pytestmark = pytest.mark.django_db


def queued_on(*urls: str) -> Run:
    document = config_document(urls[0])
    document["engine"] = [{"url": url} for url in urls]
    return make_run(RunState.QUEUED, config=document)


def nowhere() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_a_queued_run_takes_an_engine_and_gives_one_up_in_its_stored_config(
    operator_client: APIClient, sim_engine: SimEngine
) -> None:
    gone = nowhere()
    run = queued_on(gone)
    added = operator_client.post(
        f"/api/runs/{run.pk}/engines/", {"engine": sim_engine.url}, format="json"
    )
    assert added.status_code == 202, added.content
    body = added.json()
    joined = urlsplit(sim_engine.url).netloc
    assert (body["mode"], body["engine"], body["status"]) == ("engine-add", joined, "applied")
    listed = operator_client.get(f"/api/runs/{run.pk}/engines/").json()
    assert listed == [
        {"name": urlsplit(gone).netloc, "url": gone},
        {"name": joined, "url": sim_engine.url},
    ]
    removed = operator_client.post(
        f"/api/runs/{run.pk}/engines/{urlsplit(gone).netloc}/remove/", {}, format="json"
    )
    assert removed.status_code == 202, removed.content
    assert (removed.json()["drain_s"], removed.json()["status"]) == (120.0, "applied")
    run.refresh_from_db()
    assert run.config["engine"] == [{"url": sim_engine.url}]
    last = operator_client.post(f"/api/runs/{run.pk}/engines/{joined}/remove/", {}, format="json")
    assert last.status_code == 409
    assert "last: a run needs one engine" in last.json()["detail"]
    assert Override.objects.filter(run=run).count() == 2


def test_a_registered_engine_joins_by_its_name(
    operator_client: APIClient, sim_engine: SimEngine
) -> None:
    Engine.objects.create(name="sim-a", url=sim_engine.url)
    run = queued_on(nowhere())
    added = operator_client.post(f"/api/runs/{run.pk}/engines/", {"engine": "sim-a"}, format="json")
    assert added.status_code == 202, added.content
    run.refresh_from_db()
    assert run.config["engine"][-1] == {"name": "sim-a"}
    again = operator_client.post(
        f"/api/runs/{run.pk}/engines/", {"engine": sim_engine.url}, format="json"
    )
    assert again.status_code == 409  # the same server under another name
    assert "is in run" in again.json()["detail"]


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ("", "may not be blank"),
        ("no-such-engine", "no registered engine named 'no-such-engine'"),
        ("ftp://127.0.0.1:9/", "http"),
    ],
)
def test_an_engine_that_cannot_join_is_a_400_naming_why(
    operator_client: APIClient, sim_engine: SimEngine, engine: str, message: str
) -> None:
    run = queued_on(sim_engine.url)
    answer = operator_client.post(f"/api/runs/{run.pk}/engines/", {"engine": engine}, format="json")
    assert answer.status_code == 400, answer.content
    assert message in str(answer.json()["errors"]["engine"])
    run.refresh_from_db()
    assert len(run.config["engine"]) == 1 and not Override.objects.filter(run=run).exists()


def test_an_engine_that_does_not_answer_is_refused_before_anything_is_written(
    operator_client: APIClient, sim_engine: SimEngine
) -> None:
    run = queued_on(sim_engine.url)
    answer = operator_client.post(
        f"/api/runs/{run.pk}/engines/", {"engine": nowhere()}, format="json"
    )
    assert answer.status_code == 400
    assert "did not answer with a list of models" in str(answer.json()["errors"]["engine"])
    run.refresh_from_db()
    assert len(run.config["engine"]) == 1


def test_removals_that_cannot_work_are_refused(
    operator_client: APIClient, sim_engine: SimEngine
) -> None:
    run = queued_on(sim_engine.url, nowhere())
    unknown = operator_client.post(f"/api/runs/{run.pk}/engines/elsewhere:1/remove/", {})
    assert unknown.status_code == 409 and "not in run" in unknown.json()["detail"]
    name = urlsplit(sim_engine.url).netloc
    negative = operator_client.post(
        f"/api/runs/{run.pk}/engines/{name}/remove/", {"drain_s": -1}, format="json"
    )
    assert negative.status_code == 400 and "drain_s" in negative.json()["errors"]
    ended = queued_on(sim_engine.url, nowhere())
    Run.objects.filter(pk=ended.pk).update(state=RunState.COMPLETED)
    late = operator_client.post(f"/api/runs/{ended.pk}/engines/{name}/remove/", {})
    assert late.status_code == 409 and "has ended" in late.json()["detail"]


def test_a_viewer_may_list_a_runs_engines_but_not_change_them(
    viewer_client: APIClient, sim_engine: SimEngine
) -> None:
    run = queued_on(sim_engine.url)
    assert viewer_client.get(f"/api/runs/{run.pk}/engines/").status_code == 200
    answer = viewer_client.post(
        f"/api/runs/{run.pk}/engines/", {"engine": sim_engine.url}, format="json"
    )
    assert answer.status_code == 403


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_cli_lists_adds_and_removes_a_runs_engines(
    live_server_api: LiveServer, sim_engine: SimEngine
) -> None:
    token = make_account("olga", "operator").token
    gone = nowhere()
    run = queued_on(gone)
    code, out, err = pacer(
        live_server_api, token, "runs", "add-engine", str(run.pk), sim_engine.url
    )
    joined = urlsplit(sim_engine.url).netloc
    assert code == 0, err
    assert out.strip().endswith(f"(engine-add {joined}) applied")
    code, out, _ = pacer(live_server_api, token, "runs", "engines", str(run.pk))
    assert (code, [line.split()[0] for line in out.splitlines()]) == (
        0,
        [urlsplit(gone).netloc, joined],
    )
    code, _, err = pacer(
        live_server_api, token, "runs", "remove-engine", str(run.pk), joined, "--drain", "soon"
    )
    assert code == 2 and "--drain" in err
    code, out, _ = pacer(
        live_server_api, token, "runs", "remove-engine", str(run.pk), urlsplit(gone).netloc,
        "--drain", "30s",
    )  # fmt: skip
    assert code == 0 and "engine-remove" in out
    code, _, err = pacer(live_server_api, token, "runs", "remove-engine", str(run.pk), joined)
    assert code == 1 and "a run needs one engine" in err
    code, out, err = pacer(live_server_api, token, "runs", "share", str(run.pk), "--share", "2")
    assert code == 0 and out.strip().endswith("(share x2) applied"), err
    code, _, err = pacer(live_server_api, token, "runs", "share", str(run.pk))
    assert code == 2 and "--share, --priority or both" in err


def test_a_runs_share_and_priority_are_changed_in_its_stored_config(
    operator_client: APIClient, sim_engine: SimEngine
) -> None:
    run = queued_on(sim_engine.url)
    answer = operator_client.post(
        f"/api/runs/{run.pk}/share/", {"share": 2.5, "priority": 1, "reason": "eval"}, "json"
    )
    assert answer.status_code == 202, answer.content
    body = answer.json()
    assert (body["mode"], body["share"], body["priority"], body["status"]) == (
        "share",
        2.5,
        1,
        "applied",
    )
    run.refresh_from_db()
    assert (run.config["concurrency"]["share"], run.config["concurrency"]["priority"]) == (2.5, 1)


@pytest.mark.parametrize(
    ("body", "field"),
    [({}, "share"), ({"share": 0}, "share"), ({"priority": 1000}, "priority")],
)
def test_a_share_command_that_cannot_work_is_a_400(
    operator_client: APIClient, sim_engine: SimEngine, body: dict, field: str
) -> None:
    run = queued_on(sim_engine.url)
    answer = operator_client.post(f"/api/runs/{run.pk}/share/", body, format="json")
    assert answer.status_code == 400 and field in answer.json()["errors"], answer.content
    assert not Override.objects.filter(run=run).exists()


def test_a_viewer_may_not_change_a_runs_share(
    viewer_client: APIClient, sim_engine: SimEngine
) -> None:
    run = queued_on(sim_engine.url)
    answer = viewer_client.post(f"/api/runs/{run.pk}/share/", {"share": 2}, format="json")
    assert answer.status_code == 403
