"""What a run leaves behind, read through the API: decisions in cursor pages, oldest first;
engine samples downsampled by the database; steps and their acknowledgements; evaluation
waves; and streamed exports."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.http import StreamingHttpResponse
from rest_framework.test import APIClient

from controlplane.runs.api import export
from controlplane.runs.models import EngineSample, EvalRecord, Override, Run, StepRecord
from tests.api.conftest import T0, make_decisions, make_run, make_step

pytestmark = pytest.mark.django_db


@pytest.fixture
def run() -> Run:
    return make_run()


def test_decisions_are_paged_oldest_first_by_cursor_with_every_field(
    viewer_client: APIClient, run: Run
) -> None:
    made = make_decisions(run, 25)
    make_decisions(make_run(), 3)  # another run's: never listed
    page = viewer_client.get(f"/api/runs/{run.pk}/decisions/", {"page_size": 10}).json()
    first = page["results"][0]
    assert first == {
        "id": made[0].pk,
        "run": run.pk,
        "step": 0,
        "at": "2026-11-30T12:00:00Z",
        "kind": "grow",
        "cause": "clear",
        "signal": "clear",
        "cap_before": 10,
        "cap_after": 11,
        "reason": "Increased concurrency 10 -> 11 (clear)",
        "shed": 0,
        "shadow_before": None,
        "shadow_after": None,
        "alert": False,
        "applied": True,
        "figures": {"kv_usage": 0.5},
        "engine": "",
        "override": None,
    }
    ids = [d["id"] for d in page["results"]]
    while page["next"]:
        make_decisions(run, 1, start=T0 + timedelta(hours=1))  # a live run keeps writing
        page = viewer_client.get(page["next"]).json()
        ids += [d["id"] for d in page["results"]]
    assert ids[:25] == [d.pk for d in made]
    assert len(ids) == len(set(ids))  # no row twice although rows arrived while paging


def test_since_a_time_or_a_decision_id_and_kind_filter(viewer_client: APIClient, run: Run) -> None:
    made = make_decisions(run, 10)
    pins = make_decisions(run, 2, start=T0 + timedelta(minutes=5), kind="pin")
    url = f"/api/runs/{run.pk}/decisions/"

    def ids(**params: object) -> list[int]:
        response = viewer_client.get(url, params)
        assert response.status_code == 200, response.json()
        return [d["id"] for d in response.json()["results"]]

    assert ids(since="2026-11-30T12:00:07Z") == [made[8].pk, made[9].pk, *[p.pk for p in pins]]
    assert ids(since="2026-11-30T12:00:07") == ids(since="2026-11-30T12:00:07+00:00")
    assert ids(since=str(made[7].pk)) == [made[8].pk, made[9].pk, *[p.pk for p in pins]]
    assert ids(kind="pin") == [p.pk for p in pins]
    assert ids(kind="pin,grow", since=str(pins[0].pk)) == [pins[1].pk]
    for bad in ({"since": "noon"}, {"kind": "explode"}, {"since": "9" * 30}, {"since": "²"}):
        assert viewer_client.get(url, bad).status_code == 400


def _sample(run: Run, *, engine: str, second: float, **figures: object) -> EngineSample:
    values = {
        "role": "unified",
        "health": "up",
        "kv_capacity_tokens": 100_000,
        "max_model_len": 4096,
        "kv_usage": 0.5,
        "num_running": 10,
        "num_waiting": 0,
        "num_waiting_capacity": 0,
        "num_preemptions": 0,
        "prefix_cache_hits": 0,
        "prefix_cache_queries": 0,
        "generation_tokens": 0,
        "interval_s": 5.0,
        "staleness_s": 0.1,
    }
    values.update(figures)
    return EngineSample(run=run, at=T0 + timedelta(seconds=second), engine_id=engine, **values)


def test_samples_are_binned_with_means_of_gauges_sums_of_deltas_and_rates(
    viewer_client: APIClient, run: Run
) -> None:
    a = {"engine": "a"}
    rows = [
        # engine a, bin [0, 60): two samples
        _sample(run, second=5, kv_usage=0.2, num_running=10, num_waiting=2, num_preemptions=1,
                generation_tokens=500, prefix_cache_hits=30, prefix_cache_queries=100,
                inflight_train=12, inflight_eval=2, **a),
        _sample(run, second=10, kv_usage=0.6, num_running=30, num_waiting=0, num_preemptions=3,
                generation_tokens=1500, prefix_cache_hits=70, prefix_cache_queries=100,
                health="stale", staleness_s=4.0, inflight_train=16, inflight_eval=0, **a),
        # engine a, bin [60, 120): one sample, the first of a restarted engine
        _sample(run, second=65, kv_usage=0.9, interval_s=None, restarted=True, **a),
        # engine b, bin [0, 60)
        _sample(run, engine="b", second=7, kv_usage=0.4, generation_tokens=2000, interval_s=10.0),
    ]  # fmt: skip
    EngineSample.objects.bulk_create(rows)
    response = viewer_client.get(f"/api/runs/{run.pk}/samples/", {"step_s": 60})
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["step_s"] == 60.0
    points = {(p["engine"], p["at"]): p for p in body["points"]}
    assert list(points) == [
        ("a", "2026-11-30T12:00:00Z"),
        ("a", "2026-11-30T12:01:00Z"),
        ("b", "2026-11-30T12:00:00Z"),
    ]
    first = points[("a", "2026-11-30T12:00:00Z")]
    assert first["samples"] == 2
    assert first["kv_usage"] == pytest.approx(0.4)
    assert first["kv_usage_max"] == pytest.approx(0.6)
    assert first["num_running"] == pytest.approx(20.0)
    assert first["num_waiting"] == pytest.approx(1.0)
    assert (first["inflight_train"], first["inflight_eval"]) == (pytest.approx(14.0), 1.0)
    assert (first["preemptions"], first["generation_tokens"]) == (4, 2000)
    assert (first["prefix_cache_hits"], first["prefix_cache_queries"]) == (100, 200)
    assert first["seconds"] == pytest.approx(10.0)
    assert first["tokens_per_s"] == pytest.approx(200.0)
    assert first["preemptions_per_s"] == pytest.approx(0.4)
    assert first["prefix_hit_rate"] == pytest.approx(0.5)
    assert (first["not_up"], first["restarts"], first["staleness_max_s"]) == (1, 0, 4.0)
    restarted = points[("a", "2026-11-30T12:01:00Z")]
    assert restarted["restarts"] == 1 and restarted["tokens_per_s"] is None
    assert restarted["prefix_hit_rate"] is None
    assert points[("b", "2026-11-30T12:00:00Z")]["tokens_per_s"] == pytest.approx(200.0)

    only_b = viewer_client.get(f"/api/runs/{run.pk}/samples/", {"step_s": 60, "engine": "b"})
    assert [p["engine"] for p in only_b.json()["points"]] == ["b"]
    window = viewer_client.get(
        f"/api/runs/{run.pk}/samples/",
        {"step_s": 5, "since": "2026-11-30T12:00:06Z", "until": "2026-11-30T12:01:00Z"},
    ).json()
    assert [(p["engine"], p["at"]) for p in window["points"]] == [
        ("a", "2026-11-30T12:00:10Z"),
        ("b", "2026-11-30T12:00:05Z"),
    ]


def test_a_week_of_5_s_polls_comes_back_in_one_page_of_nice_bins(
    viewer_client: APIClient, run: Run
) -> None:
    week = 7 * 86400
    EngineSample.objects.bulk_create(
        [_sample(run, engine=e, second=s) for e in ("a", "b") for s in (0, week - 5)]
    )
    body = viewer_client.get(f"/api/runs/{run.pk}/samples/").json()
    assert body["step_s"] == 900.0  # the least nice step giving at most 1,000 points a week
    too_fine = viewer_client.get(f"/api/runs/{run.pk}/samples/", {"step_s": 5})
    assert too_fine.status_code == 400
    assert "use step_s >= 605" in too_fine.json()["errors"]["step_s"][0]
    backwards = viewer_client.get(
        f"/api/runs/{run.pk}/samples/",
        {"since": "2026-11-30T13:00:00Z", "until": "2026-11-30T12:00:00Z"},
    )
    assert backwards.status_code == 400 and "until" in backwards.json()["errors"]


def test_steps_are_listed_by_step(viewer_client: APIClient, run: Run) -> None:
    for step in (2, 1, 3):
        make_step(run, step)
    rows = viewer_client.get(f"/api/runs/{run.pk}/steps/").json()["results"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[0]["path"] == "/tmp/steps/000001" and rows[0]["acked_at"] is None


def test_steps_after_a_step_are_the_rest_and_a_bad_after_is_a_400(
    viewer_client: APIClient, run: Run
) -> None:
    # The run page reads only the steps it lacks after a live step event.
    for step in (1, 2, 3):
        make_step(run, step, version=step - 1)
    url = f"/api/runs/{run.pk}/steps/"
    rows = viewer_client.get(url, {"after": 1}).json()["results"]
    assert [(r["step"], r["policy_version"]) for r in rows] == [(2, 1), (3, 2)]
    assert {"reward_mean", "reward_std"} <= rows[0].keys()
    assert viewer_client.get(url, {"after": 3}).json()["results"] == []
    for bad in ("-1", "two", str(2**31)):
        answer = viewer_client.get(url, {"after": bad})
        assert answer.status_code == 400 and "after" in answer.json()["errors"], bad


def test_an_ack_is_idempotent_and_refused_for_unwritten_steps_or_another_version(
    operator_client: APIClient, private_queue: str
) -> None:
    run = make_run(config={"name": "r", "trainer": {"mode": "external"}})
    make_step(run, 1, version=0)
    url = f"/api/runs/{run.pk}/steps/1/ack/"
    first = operator_client.post(url, {"policy_version": 1})
    assert first.status_code == 200
    assert first.json()["acknowledged"] is True and first.json()["step"]["acked_version"] == 1
    acked_at = StepRecord.objects.get(run=run, step=1).acked_at
    again = operator_client.post(url, {"policy_version": 1})
    assert again.status_code == 200 and again.json()["acknowledged"] is False
    assert StepRecord.objects.get(run=run, step=1).acked_at == acked_at
    other = operator_client.post(url, {"policy_version": 2})
    assert (
        other.status_code == 409 and "acknowledged with policy version 1" in other.json()["detail"]
    )
    unwritten = operator_client.post(f"/api/runs/{run.pk}/steps/2/ack/", {"policy_version": 1})
    assert unwritten.status_code == 409
    assert unwritten.json() == {"detail": f"step 2 of run {run.pk} is not written yet"}
    no_slash = operator_client.post(f"/api/runs/{run.pk}/steps/1/ack", {"policy_version": 1})
    assert no_slash.status_code == 200
    for bad in ({}, {"policy_version": -1}, {"policy_version": "new"}):
        assert operator_client.post(url, bad).status_code == 400


def test_an_ack_for_a_run_that_waits_for_none_is_409(operator_client: APIClient, run: Run) -> None:
    make_step(run, 1)
    response = operator_client.post(f"/api/runs/{run.pk}/steps/1/ack/", {"policy_version": 1})
    assert response.status_code == 409 and "trainer mode 'none'" in response.json()["detail"]


def test_eval_waves_are_listed(viewer_client: APIClient, run: Run) -> None:
    EvalRecord.objects.create(
        run=run, wave=1, after_step=10, policy_version=10, started_at=T0, finished_at=T0,
        episodes={"arithmetic": 32}, failed={"arithmetic": 0}, reward_mean={"arithmetic": 0.75},
    )  # fmt: skip
    rows = viewer_client.get(f"/api/runs/{run.pk}/evals/").json()["results"]
    assert rows[0]["wave"] == 1 and rows[0]["reward_mean"] == {"arithmetic": 0.75}


def _body(response: StreamingHttpResponse) -> str:
    assert isinstance(response, StreamingHttpResponse)
    return b"".join(response.streaming_content).decode()


def test_decisions_export_as_streamed_csv_in_chunks(
    viewer_client: APIClient, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "EXPORT_CHUNK_ROWS", 7)  # several chunks from 25 rows
    made = make_decisions(run, 25)
    Override.objects.create(run=run, mode="pin", cap=5, ttl_s=1.0, decision=made[3])
    response = viewer_client.get(f"/api/runs/{run.pk}/export/decisions/", {"format": "csv"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="run-{run.pk}-decisions.csv"'
    rows = list(csv.reader(io.StringIO(_body(response))))
    assert rows[0] == [
        "id", "run", "step", "at", "kind", "cause", "signal", "cap_before", "cap_after",
        "reason", "shed", "shadow_before", "shadow_after", "alert", "applied", "figures",
        "engine", "override",
    ]  # fmt: skip
    assert [int(r[0]) for r in rows[1:]] == [d.pk for d in made]
    assert rows[1][3] == "2026-11-30T12:00:00+00:00"
    assert json.loads(rows[1][15]) == {"kv_usage": 0.5}
    assert rows[4][17] != "" and rows[5][17] == ""


def test_steps_and_decisions_export_as_streamed_json(
    viewer_client: APIClient, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "EXPORT_CHUNK_ROWS", 2)
    for step in (1, 2, 3):
        make_step(run, step)
    steps = json.loads(_body(viewer_client.get(f"/api/runs/{run.pk}/export/steps/")))
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert steps[0]["run"] == run.pk and steps[0]["written_at"] == "2026-11-30T12:00:01+00:00"
    make_decisions(run, 3)
    decisions = viewer_client.get(f"/api/runs/{run.pk}/export/decisions/", {"format": "json"})
    assert decisions["Content-Type"] == "application/json"
    assert [d["cap_after"] for d in json.loads(_body(decisions))] == [11, 12, 13]
    empty = viewer_client.get(f"/api/runs/{make_run().pk}/export/decisions/?format=json")
    assert json.loads(_body(empty)) == []
    empty_csv = viewer_client.get(f"/api/runs/{make_run().pk}/export/steps/?format=csv")
    assert _body(empty_csv).splitlines()[0].startswith("step,run,started_at")


def test_export_refuses_unknown_tables_and_formats(viewer_client: APIClient, run: Run) -> None:
    assert viewer_client.get(f"/api/runs/{run.pk}/export/samples/").status_code == 404
    bad = viewer_client.get(f"/api/runs/{run.pk}/export/steps/", {"format": "xml"})
    assert bad.status_code == 400 and bad["Content-Type"] == "application/json"
