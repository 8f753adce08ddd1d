"""The dashboard's pages as Django serves them: who may see what, what each page hands its
script, and the runs list's server time with real rows."""

from __future__ import annotations

import json
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from controlplane.dashboard.reads import kv_lines
from controlplane.runs.models import Decision, Engine, EngineSample, Run, RunState, StepRecord
from controlplane.runs.roles import grant

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

RUNS_LIST_BUDGET_S = 0.300


def signed_in(role: str) -> Client:
    user = get_user_model().objects.create_user(username=f"{role}-{uuid.uuid4().hex[:8]}")
    grant(user, role)
    client = Client()
    client.force_login(user)
    return client


def page_data(html: str) -> dict:
    start = html.index('<script id="page-data" type="application/json">') + len(
        '<script id="page-data" type="application/json">'
    )
    return json.loads(html[start : html.index("</script>", start)])


def test_an_anonymous_visitor_is_sent_to_the_dashboards_own_sign_in(client: Client) -> None:
    Run.objects.create(name="secret-sweep", config={})
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/signin/?next=/"
    page = client.get("/signin/?next=/").content.decode()
    assert 'name="username"' in page and "secret-sweep" not in page


def test_signing_in_with_the_form_lands_on_the_runs_list(client: Client) -> None:
    get_user_model().objects.create_user(username="olga", password="right")
    refused = client.post("/signin/", {"username": "olga", "password": "wrong"})
    assert refused.status_code == 200 and "do not match" in refused.content.decode()
    accepted = client.post("/signin/", {"username": "olga", "password": "right", "next": "/"})
    assert accepted.status_code == 302 and accepted["Location"] == "/"
    assert client.post("/signout/").status_code == 302
    assert client.get("/").status_code == 302


def test_a_page_that_does_not_exist_is_the_sites_own_404_page(client: Client) -> None:
    page = client.get("/no/such/page/")
    assert page.status_code == 404
    text = page.content.decode()
    assert 'class="brand"' in text and "No such page" in text  # the site's base page
    assert client.get("/api/no/such/").json() == {"detail": "not found"}


def test_the_runs_list_shows_each_runs_figures_and_the_new_run_button_to_operators() -> None:
    run = Run.objects.create(
        name="gsm8k-rollouts",
        config={"max_steps": 40},
        state=RunState.RUNNING,
        step=12,
        cap=96,
        policy_cap=120,
        inflight_train=90,
        inflight_eval=6,
        generation_tokens_per_s=12345.0,
    )
    at = datetime(2026, 1, 1, tzinfo=UTC)
    for index, cap in enumerate((16, 48, 96)):
        Decision.objects.create(
            run=run,
            at=at + timedelta(seconds=index),
            step=0,
            kind="grow",
            cause="clear",
            signal="clear",
            cap_before=cap // 2,
            cap_after=cap,
            reason="grow",
        )
    for step, reward in (
        (1, 0.1),
        (3, 0.4124),
        (2, 0.9),
    ):  # the newest step's, not the last written
        _step(run, step, reward).save()
    quiet = Run.objects.create(name="no-steps-yet", config={}, state=RunState.QUEUED)
    operator_page = signed_in("operator").get("/").content.decode()
    assert "gsm8k-rollouts" in operator_page and 'id="new-run"' in operator_page
    assert _reward_cell(operator_page, run) == "0.412"
    assert _reward_cell(operator_page, quiet) == "\N{EN DASH}"
    assert "12 / 40" in operator_page and "96 / " in operator_page and "12.3k" in operator_page
    assert "database: ok" in operator_page and "redis: ok" in operator_page
    start = operator_page.index('<script id="sparklines" type="application/json">')
    sparklines = json.loads(operator_page[start:].split(">", 1)[1].split("</script>")[0])
    assert [cap for _, cap in sparklines[str(run.pk)]] == [16, 48, 96]
    viewer_page = signed_in("viewer").get("/").content.decode()
    assert "gsm8k-rollouts" in viewer_page and 'id="new-run"' not in viewer_page


def test_the_new_run_page_is_for_operators_and_offers_examples_and_engines() -> None:
    Engine.objects.create(name="sim-engine-0", url="http://127.0.0.1:8100")
    assert signed_in("viewer").get("/runs/new/").status_code == 403
    page = signed_in("operator").get("/runs/new/").content.decode()
    data = page_data(page)
    assert {"demo", "multiturn", "arithmetic"} <= set(data["examples"])
    assert json.loads(data["examples"]["demo"]["json"])["name"] == "demo-multiturn"
    assert 'value="sim-engine-0"' in page
    assert data["api"]["runs"] == "/api/runs/"


def test_the_run_page_hands_its_script_the_policys_kv_lines_and_the_viewers_reason() -> None:
    config = {
        "name": "r",
        "concurrency": {
            "policy": "reference",
            "observe": True,
            "reference": {"shed_kv_usage": 0.95},
        },
        "env": [{"name": "arithmetic"}],
        "engine": [{"url": "http://127.0.0.1:8100", "max_num_seqs": 64}],
    }
    run = Run.objects.create(name="r", config=config)
    viewer_page = signed_in("viewer").get(f"/runs/{run.pk}/").content.decode()
    data = page_data(viewer_page)
    assert data["kv_lines"] == {"policy": "reference", "trim": 0.8, "shed": 0.95}
    assert data["engines"] == [
        {
            "engine_id": "127.0.0.1:8100",
            "url": "http://127.0.0.1:8100",
            "role": "unified",
            "max_num_seqs": 64,
        }
    ]
    assert not data["operator"] and "viewer" in data["viewer_reason"]
    assert 'id="observe-banner"' in viewer_page
    operator_data = page_data(signed_in("operator").get(f"/runs/{run.pk}/").content.decode())
    assert operator_data["operator"] and operator_data["viewer_reason"] == ""
    assert signed_in("viewer").get("/runs/999999/").status_code == 404


def test_the_run_page_hands_its_script_each_engines_newest_weights_decision() -> None:
    """What the engine table's Version column starts from: per engine the version its newest
    weights decision left it on (a failed update's is the version it kept), none for an
    engine never updated; and whether the run's engines take weights at all."""
    config = {
        "name": "w",
        "trainer": {"mode": "external"},
        "env": [{"name": "arithmetic"}],
        "engine": [{"name": "sim-engine-0"}, {"name": "sim-engine-1"}, {"name": "sim-engine-2"}],
    }
    run = Run.objects.create(name="w", config=config)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    for seconds, engine, version, alert in (
        (1, "sim-engine-0", 1, False),
        (2, "sim-engine-1", 1, False),
        (3, "sim-engine-0", 2, False),
        (4, "sim-engine-1", 1, True),  # could not load version 2: kept 1
    ):
        Decision.objects.create(
            run=run,
            at=at + timedelta(seconds=seconds),
            step=version,
            kind="weights",
            cause="weights",
            signal="clear",
            cap_before=8,
            cap_after=8,
            reason=f"{engine} at {version}",
            alert=alert,
            engine=engine,
            figures={"version": version, "target": 2, "seconds": 1.5},
        )
    data = page_data(signed_in("viewer").get(f"/runs/{run.pk}/").content.decode())
    served = {
        engine: (d["version"], d["alert"], d["reason"]) for engine, d in data["served"].items()
    }
    assert served == {
        "sim-engine-0": (2, False, "sim-engine-0 at 2"),
        "sim-engine-1": (1, True, "sim-engine-1 at 1"),
    }
    assert data["relays_weights"] is True
    plain = Run.objects.create(name="p", config={"name": "p", "engine": [{"name": "x"}]})
    data = page_data(signed_in("viewer").get(f"/runs/{plain.pk}/").content.decode())
    assert data["served"] == {} and data["relays_weights"] is False


def test_the_run_page_hands_its_script_each_engines_newest_join_drain_or_leave() -> None:
    """What the engine table marks an engine "draining" or "left" by from the first paint,
    however old the decision: per engine its newest join, drain or leave, none for an engine
    never added or taken out; the engine controls and the registered engines' list are the
    operator's only."""
    Engine.objects.create(name="sim-engine-9", url="http://127.0.0.1:8199")
    run = Run.objects.create(name="m", config={"name": "m", "engine": [{"name": "sim-engine-1"}]})
    at = datetime(2026, 1, 1, tzinfo=UTC)
    for seconds, engine, kind, figures in (
        (1, "sim-engine-0", "engine-drain", {"inflight": 3, "drain_s": 120}),
        (2, "sim-engine-2", "engine-join", {}),
        (3, "sim-engine-2", "engine-drain", {"inflight": 0, "drain_s": 5}),
        (4, "sim-engine-2", "engine-leave", {"cancelled": 0, "drained_s": 0.5}),
        (5, "sim-engine-1", "weights", {"version": 1}),
    ):
        Decision.objects.create(
            run=run,
            at=at + timedelta(seconds=seconds),
            step=0,
            kind=kind,
            cause="operator",
            signal="clear",
            cap_before=8,
            cap_after=8,
            reason=f"{engine} {kind}",
            engine=engine,
            figures=figures,
        )
    viewer_page = signed_in("viewer").get(f"/runs/{run.pk}/").content.decode()
    changes = page_data(viewer_page)["engine_changes"]
    assert {engine: (d["kind"], d["figures"]) for engine, d in changes.items()} == {
        "sim-engine-0": ("engine-drain", {"inflight": 3, "drain_s": 120}),
        "sim-engine-2": ("engine-leave", {"cancelled": 0, "drained_s": 0.5}),
    }
    assert changes["sim-engine-0"]["at"] == (at + timedelta(seconds=1)).isoformat()
    assert 'id="engine-controls"' not in viewer_page and "sim-engine-9" not in viewer_page
    operator_page = signed_in("operator").get(f"/runs/{run.pk}/").content.decode()
    assert 'id="engine-controls"' in operator_page
    assert '<option value="sim-engine-9">http://127.0.0.1:8199</option>' in operator_page
    assert 'id="engine-drain" type="number" min="0" max="86400" step="1" value="120"' in (
        operator_page
    )


def test_kv_lines_fall_back_to_the_policys_defaults_for_a_config_that_does_not_parse() -> None:
    assert kv_lines({"bogus": 1}).trim == 0.92 and kv_lines({"bogus": 1}).shed == 0.96
    legacy = {"concurrency": {"policy": "fixed"}, "unknown": True}
    assert (kv_lines(legacy).trim, kv_lines(legacy).shed) == (0.8, 0.9)


def _step(run: Run, step: int, reward: float) -> StepRecord:
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=step)
    return StepRecord(
        run=run, step=step, started_at=at, written_at=at, seconds=1.0, policy_version=step - 1,
        episodes=16, tokens=1000, reward_mean=reward, reward_std=0.1, generated_tokens=900,
        finished_train=16, finished_eval=0, failed=0, cancelled=0, dropped_groups=0, cap=64,
        inflight=60, path=f"/tmp/steps/{step:06d}",
    )  # fmt: skip


def _reward_cell(html: str, run: Run) -> str:
    row = html[html.index(f'<tr data-run="{run.pk}">') :]
    return row.split('<td class="num reward">', 1)[1].split("</td>", 1)[0]


def _seed(runs: int, engines: int, polls: int, decisions: int) -> None:
    """Runs with the rows a live hour leaves: a sample per engine per poll, decisions."""
    start = datetime.now(UTC) - timedelta(hours=1)
    for index in range(runs):
        run = Run.objects.create(
            name=f"load-{index}",
            config={"max_steps": 500, "engine": [{"name": f"e{i}"} for i in range(engines)]},
            state=RunState.RUNNING,
            step=100,
            cap=256,
            policy_cap=256,
            inflight_train=250,
            inflight_eval=0,
            generation_tokens_per_s=8000.0,
        )
        EngineSample.objects.bulk_create(
            EngineSample(
                run=run,
                at=start + timedelta(seconds=2 * poll),
                engine_id=f"e{engine}",
                role="unified",
                health="up",
                kv_capacity_tokens=1_000_000,
                max_model_len=8192,
                kv_usage=0.8,
                num_running=60,
                num_waiting=0,
                num_waiting_capacity=0,
                num_preemptions=0,
                prefix_cache_hits=10,
                prefix_cache_queries=20,
                generation_tokens=2000,
                interval_s=2.0,
            )
            for poll in range(polls)
            for engine in range(engines)
        )
        Decision.objects.bulk_create(
            Decision(
                run=run,
                at=start + timedelta(seconds=3 * n),
                step=n // 10,
                kind="grow",
                cause="clear",
                signal="clear",
                cap_before=n,
                cap_after=n + 1,
                reason="grow",
            )
            for n in range(decisions)
        )
        StepRecord.objects.bulk_create(_step(run, n, 0.5) for n in range(1, run.step + 1))


def test_the_runs_list_renders_ten_runs_of_four_engines_within_300_ms(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _seed(runs=10, engines=4, polls=1800, decisions=1200)  # an hour of 2 s polls each
    client = signed_in("operator")
    client.get("/")  # warm: templates compiled, connections made
    timings = []
    with CaptureQueriesContext(connection) as queries:
        for _ in range(7):
            started = time.perf_counter()
            response = client.get("/")
            timings.append(time.perf_counter() - started)
            assert response.status_code == 200
    assert response.content.decode().count('class="sparkline"') == 10
    median = statistics.median(timings)
    per_request = len(queries.captured_queries) // 7
    with capsys.disabled():
        print(
            f"\nruns list, 10 runs x 4 engines (72,000 samples, 12,000 decisions): server time "
            f"median {median * 1000:.1f} ms, max {max(timings) * 1000:.1f} ms, "
            f"{per_request} queries per request"
        )
    assert median < RUNS_LIST_BUDGET_S


def test_the_compare_page_hands_its_script_each_runs_series_links_in_constant_queries() -> None:
    client = signed_in("viewer")
    configs = [{"name": "a", "max_steps": 9}, {"name": "b", "max_steps": 9, "seed": 3}]
    runs = [Run.objects.create(name=c["name"], config=c, state=RunState.COMPLETED) for c in configs]
    ids = ",".join(str(run.pk) for run in runs)
    with CaptureQueriesContext(connection) as few:
        response = client.get(f"/compare/?runs={ids}")
    assert response.status_code == 200
    html = response.content.decode()
    data = page_data(html)
    assert [(r["id"], r["colour"]) for r in data["runs"]] == [(runs[0].pk, 0), (runs[1].pk, 1)]
    assert data["runs"][1]["api"]["samples"] == f"/api/runs/{runs[1].pk}/samples/"
    assert 'data-path="seed"' in html and 'data-path="name"' in html
    assert 'data-path="max_steps"' not in html  # the same in both
    for run in runs:  # a long history costs the page no more queries
        Decision.objects.bulk_create(
            Decision(run=run, at=datetime.now(UTC), step=0, kind="grow", cause="clear",
                     signal="clear", cap_before=1, cap_after=2, reason="r")
            for _ in range(200)
        )  # fmt: skip
    with CaptureQueriesContext(connection) as many:
        assert client.get(f"/compare/?runs={ids}").status_code == 200
    assert len(many) == len(few)
    assert client.get(f"/compare/?runs={runs[0].pk}").status_code == 400
    assert client.get(f"/compare/?runs={ids},{runs[1].pk + 50}").status_code == 404
