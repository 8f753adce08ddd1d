"""Bad input that used to reach past the API's checks and answer 500: numbers too long for
Python to read, page cursors crafted by hand, times at the edge of the calendar. Each is a
400 with the usual error shape, or a 404 for a cursor that points nowhere."""

from __future__ import annotations

from base64 import b64encode

import pytest
from rest_framework.test import APIClient

from controlplane.runs.models import Override, Run
from tests.api.conftest import make_decisions, make_run
from tests.api.test_records import make_step

pytestmark = pytest.mark.django_db

HUGE = "9" * 5000  # past Python's 4,300-digit limit on reading an integer
EDGE_OF_TIME = "9999-12-31T23:59:59-23:59"  # a valid ISO time that is past year 9999 in UTC


def crafted(query: str) -> str:
    return b64encode(query.encode("ascii")).decode("ascii")


# Positions that are no value of the ordering's column, one out of every range, and a cursor
# whose offset or direction is not a number.
CURSORS = [
    pytest.param(crafted("p=abc"), id="p=abc"),
    pytest.param(crafted(f"p={HUGE}"), id="p=5000-digits"),
    pytest.param(crafted("p=99999999999999999999999"), id="p=past-64-bits"),
    pytest.param(crafted("p=9999-12-31 23:59:59-23:59"), id="p=past-9999-in-utc"),
    pytest.param(crafted("p=a%00b"), id="p=nul"),
    pytest.param(crafted(f"o={HUGE}"), id="o=5000-digits"),
    pytest.param(crafted("r=x&p=1"), id="r=x"),
]


@pytest.fixture
def run() -> Run:
    run = make_run()
    make_decisions(run, 3)
    for step in (1, 2):
        make_step(run, step)
    Override.objects.create(run=run, mode="set", cap=8)
    return run


def lists(run: Run) -> list[str]:
    return [
        "/api/runs/",
        f"/api/runs/{run.pk}/decisions/",
        f"/api/runs/{run.pk}/steps/",
        f"/api/runs/{run.pk}/overrides/",
        f"/api/runs/{run.pk}/evals/",
    ]


def assert_error(response: object, status: int, field: str | None = None) -> None:
    assert response.status_code == status, response.content  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert isinstance(body["detail"], str)
    if field is not None:
        assert field in body["errors"], body


def test_an_integer_too_long_to_read_in_toml_is_a_400_at_the_body(
    operator_client: APIClient,
) -> None:
    toml = f'name = "big"\nbatch_size = {HUGE}\n'
    response = operator_client.post("/api/runs/", toml, content_type="application/toml")
    assert_error(response, 400, "body")
    assert "does not parse" in response.json()["detail"]
    assert not Run.objects.exists()


def test_an_integer_too_long_to_read_in_json_is_a_400_at_the_body(
    operator_client: APIClient,
) -> None:
    body = f'{{"name": "big", "batch_size": {HUGE}}}'
    response = operator_client.post("/api/runs/", body, content_type="application/json")
    assert_error(response, 400, "body")


@pytest.mark.parametrize("size", [HUGE, "1" + "0" * 30, "0", "-1", "1e3"])
def test_a_page_size_that_is_no_whole_number_in_range_is_a_400(
    viewer_client: APIClient, run: Run, size: str
) -> None:
    for url in lists(run):
        assert_error(viewer_client.get(url, {"page_size": size}), 400, "page_size")


@pytest.mark.parametrize("cursor", CURSORS)
def test_a_crafted_cursor_is_a_404_on_every_list(
    viewer_client: APIClient, run: Run, cursor: str
) -> None:
    for url in lists(run):
        assert_error(viewer_client.get(url, {"cursor": cursor}), 404)


def test_a_cursor_the_api_made_still_pages(viewer_client: APIClient, run: Run) -> None:
    for url in lists(run):
        first = viewer_client.get(url, {"page_size": 1}).json()
        if first["next"]:
            assert viewer_client.get(first["next"]).status_code == 200


@pytest.mark.parametrize("since", [EDGE_OF_TIME, "0001-01-01T00:00:00+23:59"])
def test_a_time_past_the_calendar_in_utc_is_a_400(
    viewer_client: APIClient, run: Run, since: str
) -> None:
    decisions = viewer_client.get(f"/api/runs/{run.pk}/decisions/", {"since": since})
    assert_error(decisions, 400, "since")
    samples = viewer_client.get(f"/api/runs/{run.pk}/samples/", {"since": since})
    assert_error(samples, 400, "since")
    runs = viewer_client.get("/api/runs/", {"created_after": since})
    assert_error(runs, 400, "created_after")
