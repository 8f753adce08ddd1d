"""Runs compared through the API: each run's summary in the order asked, and only the config
fields that differ, as dotted paths through nested tables and arrays, with each run's value
or its absence; refusals for the wrong number of runs, ids that are not ids, and runs that do
not exist (named)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.runs.models import RunState
from tests.api.conftest import make_run, make_step

pytestmark = pytest.mark.django_db

BASE: dict[str, Any] = {
    "name": "base",
    "max_steps": 20,
    "concurrency": {"policy": "pacer", "max_inflight": 128, "pacer": {"target_kv_usage": 0.88}},
    "env": [{"name": "multiturn", "args": {"turns": 2, "prompt_tokens": 64}}],
    "engine": [{"name": "sim-engine-0"}],
}


def variant(**changes: Any) -> dict[str, Any]:
    """BASE with some top-level values replaced (deep copies: each run its own document)."""
    document = copy.deepcopy(BASE)
    document.update(copy.deepcopy(changes))
    return document


def by_path(body: dict[str, Any]) -> dict[str, list[tuple[bool, Any]]]:
    return {
        d["path"]: [(v["present"], v["value"]) for v in d["values"]] for d in body["differences"]
    }


def test_summaries_in_the_order_asked_and_only_the_differing_fields(
    viewer_client: APIClient,
) -> None:
    first = make_run(name="a", config=variant(name="a"), state=RunState.COMPLETED, step=20, cap=96)
    second_config = variant(
        name="b",
        concurrency={
            "policy": "reference",
            "max_inflight": 128,
            "reference": {"trim_kv_usage": 0.8},
        },
        env=[
            {"name": "multiturn", "args": {"turns": 4, "prompt_tokens": 64}},
            {"name": "arithmetic", "kind": "eval", "episodes": 8},
        ],
    )
    second = make_run(name="b", config=second_config, step=3, cap=40)
    make_step(first, 19)
    newest = make_step(first, 20)
    newest.reward_mean = 0.75
    newest.save()

    response = viewer_client.get(f"/api/runs/compare/?runs={second.pk},{first.pk}")
    assert response.status_code == 200, response.json()
    body = response.json()
    runs = body["runs"]
    assert [r["id"] for r in runs] == [second.pk, first.pk]
    assert [(r["name"], r["state"], r["policy"]) for r in runs] == [
        ("b", "running", "reference"),
        ("a", "completed", "pacer"),
    ]
    assert [(r["step"], r["max_steps"], r["cap"]) for r in runs] == [(3, 20, 40), (20, 20, 96)]
    assert [r["latest_reward"] for r in runs] == [None, 0.75]
    assert "started_at" in runs[0] and runs[0]["links"]["samples"].endswith(
        f"/api/runs/{second.pk}/samples/"
    )
    absent = (False, None)
    # Keys sorted at each level, items by index: the same on every database.
    assert list(by_path(body).items()) == [
        ("concurrency.pacer.target_kv_usage", [absent, (True, 0.88)]),
        ("concurrency.policy", [(True, "reference"), (True, "pacer")]),
        ("concurrency.reference.trim_kv_usage", [(True, 0.8), absent]),
        ("env[0].args.turns", [(True, 4), (True, 2)]),
        ("env[1].episodes", [(True, 8), absent]),
        ("env[1].kind", [(True, "eval"), absent]),
        ("env[1].name", [(True, "arithmetic"), absent]),
        ("name", [(True, "b"), (True, "a")]),
    ]
    assert [d["values"][0]["run"] for d in body["differences"]] == [second.pk] * 8


def test_a_shape_that_differs_is_one_difference_and_true_is_not_one(
    viewer_client: APIClient,
) -> None:
    lengths = {"kind": "uniform", "low": 4, "high": 48}
    runs = [
        make_run(config={"env": [{"args": {"tokens": 32}}], "observe": True, "x": None}),
        make_run(config={"env": [{"args": {"tokens": lengths}}], "observe": 1, "x": None}),
        make_run(config={"env": [{"args": {"tokens": 32}}], "observe": True}),
    ]
    response = viewer_client.get(f"/api/runs/compare/?runs={','.join(str(r.pk) for r in runs)}")
    assert response.status_code == 200, response.json()
    assert by_path(response.json()) == {
        "env[0].args.tokens": [(True, 32), (True, lengths), (True, 32)],
        "observe": [(True, True), (True, 1), (True, True)],
        "x": [(True, None), (True, None), (False, None)],  # null is not absent
    }


def test_identical_configs_have_no_differences(viewer_client: APIClient) -> None:
    one, other = make_run(config=variant()), make_run(config=variant())
    response = viewer_client.get("/api/runs/compare/", {"runs": f"{one.pk}, {other.pk}"})
    assert response.status_code == 200 and response.json()["differences"] == []


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        ("1", "compares 2 to 4 runs, got 1"),
        ("1,2,3,4,5", "compares 2 to 4 runs, got 5"),
        ("1,x", "must be run ids separated by commas"),
        ("1,-2", "must be run ids separated by commas"),
        ("1,,2", "must be run ids separated by commas"),
        ("1,2.5", "must be run ids separated by commas"),
        ("1,1", "names a run more than once"),
        (f"1,{2**63}", "holds a number larger than any run id"),
    ],
)
def test_the_wrong_runs_are_a_400_at_the_field(
    viewer_client: APIClient, runs: str, message: str
) -> None:
    response = viewer_client.get("/api/runs/compare/", {"runs": runs})
    assert response.status_code == 400
    (said,) = response.json()["errors"]["runs"]
    assert said.startswith(message), said


def test_no_runs_parameter_is_a_400(viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/runs/compare/")
    assert response.status_code == 400 and "runs" in response.json()["errors"]


def test_a_run_that_does_not_exist_is_a_404_naming_it(viewer_client: APIClient) -> None:
    run = make_run()
    missing = run.pk + 1000
    response = viewer_client.get("/api/runs/compare/", {"runs": f"{run.pk},{missing}"})
    assert response.status_code == 404
    assert response.json() == {"detail": f"no such run: {missing}"}
    response = viewer_client.get("/api/runs/compare/", {"runs": f"{missing},{missing + 1}"})
    assert response.json() == {"detail": f"no such runs: {missing}, {missing + 1}"}


def test_signing_in_is_needed(anonymous: APIClient) -> None:
    assert anonymous.get("/api/runs/compare/", {"runs": "1,2"}).status_code == 401
