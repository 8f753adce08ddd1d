"""Runs compared in the browser: three short runs hosted on the stack's simulated engines,
each with a config of its own, ticked on the runs list and opened with Compare. The page draws
a series per run on every chart (the cap with a marker per decision, in flight, tokens/s, KV
usage, step durations, reward per step), the step charts by step or by time since the start,
and the differences table lists exactly the fields in which the configs differ."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from playwright.sync_api import Page, expect

from controlplane.runs.models import Decision, Run, RunState, StepRecord
from controlplane.runs.services import run_create
from tests.browser.conftest import OPERATOR, Stack, screenshot
from tests.integration.hosting import end_run, run_document, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.sqlite]

STEPS = 5


def _documents(stack: Stack) -> list[dict[str, Any]]:
    """Three configs differing in a few fields: name, policy, a pacer setting only one sets,
    the turns per episode, the answers' length and the engine."""
    documents = []
    for name, engine, policy, turns in (
        ("compare-a", "sim-engine-0", "pacer", 2),
        ("compare-b", "sim-engine-1", "reference", 3),
        ("compare-c", "sim-engine-0", "pacer", 2),
    ):
        document = run_document(stack.engines, name=name, max_steps=STEPS)
        document["engine"] = [{"name": engine}]
        document["concurrency"]["policy"] = policy
        document["env"][0]["args"]["turns"] = turns
        documents.append(document)
    documents[2]["concurrency"]["pacer"] = {"target_kv_usage": 0.9}
    documents[2]["env"][0]["sampling"]["max_tokens"] = 48
    return documents


# What the table must list, no more: each field and its cells, run by run.
EXPECTED = {
    "concurrency.pacer.target_kv_usage": ["absent", "absent", "0.9"],
    "concurrency.policy": ["pacer", "reference", "pacer"],
    "engine[0].name": ["sim-engine-0", "sim-engine-1", "sim-engine-0"],
    "env[0].args.turns": ["2", "3", "2"],
    "env[0].sampling.max_tokens": ["32", "32", "48"],
    "name": ["compare-a", "compare-b", "compare-c"],
}


@pytest.fixture(scope="module")
def finished_runs(stack: Stack, django_db_blocker: Any) -> Iterator[list[Run]]:
    """The three runs, hosted side by side by the stack's worker until each has written its
    steps and completed."""
    with django_db_blocker.unblock():
        owner = get_user_model().objects.get(username=OPERATOR)
        # The stack's engines answer already; preflight's asyncio.run cannot run beside
        # Playwright's event loop.
        runs = [
            run_create(document=document, created_by=owner, check_engines=False)
            for document in _documents(stack)
        ]
        for run in runs:
            wait_for(
                lambda r=run: Run.objects.get(pk=r.pk).state in RunState.ended(),
                180,
                f"run {run.name} to end",
            )
        connection.close()
    yield runs
    with django_db_blocker.unblock():
        for run in runs:
            end_run(run)
        connection.close()


def chart(page: Page, name: str) -> list[list[float | None]]:
    return page.evaluate(f"() => window.pacerPlots.{name}.data.map((column) => Array.from(column))")


def known(column: list[float | None]) -> list[float]:
    return [v for v in column if v is not None]


def test_three_runs_side_by_side_with_their_config_differences(
    operator_page: Page, stack: Stack, finished_runs: list[Run], db_access: None
) -> None:
    page = operator_page
    runs = finished_runs
    for run in runs:
        assert Run.objects.get(pk=run.pk).state == RunState.COMPLETED
    page.goto(f"{stack.web.url}/")
    compare = page.locator("#compare")
    expect(compare).to_be_disabled()
    page.check(f'.compare-pick[value="{runs[0].pk}"]')
    expect(compare).to_be_disabled()  # one run is no comparison
    for run in runs[1:]:
        page.check(f'.compare-pick[value="{run.pk}"]')
    expect(compare).to_be_enabled()
    expect(page.locator("#compare-hint")).to_have_text("3 ticked (2 to 4)")
    compare.click()
    ids = ",".join(str(run.pk) for run in runs)
    expect(page).to_have_url(re.compile(rf"/compare/\?runs={re.escape(ids)}$"))
    expect(page.locator("#compare-status")).to_have_attribute("data-status", "loaded")
    page.wait_for_function("() => window.pacerCompare.loads >= 1")
    assert page.evaluate("() => window.pacerCompare.errors") == []

    # The summaries, in the order of the URL.
    rows = page.locator("#compare-runs tbody tr")
    expect(rows).to_have_count(3)
    for index, run in enumerate(runs):
        expect(rows.nth(index)).to_have_attribute("data-run", str(run.pk))
        expect(rows.nth(index)).to_contain_text(run.name)
        expect(rows.nth(index)).to_contain_text(f"{STEPS} / {STEPS}")

    # Exactly the differing fields, each run's value in its column.
    table = page.locator("#differences tbody tr")
    shown = {
        table.nth(i).get_attribute("data-path"): [
            cell.strip() for cell in table.nth(i).locator("td").all_inner_texts()[1:]
        ]
        for i in range(table.count())
    }
    assert shown == EXPECTED

    # Each chart has a series per run holding that run's own figures.
    cap = chart(page, "cap")
    assert len(cap) == 1 + 2 * len(runs)  # x, then each run's cap and its markers
    xs = cap[0]
    assert xs == sorted(xs) and xs[0] >= 0  # seconds since each run's start
    for index, run in enumerate(runs):
        decisions = list(Decision.objects.filter(run=run).order_by("at", "id"))
        markers = known(cap[2 + 2 * index])
        assert markers == [d.cap_after for d in decisions], run.name
        assert known(cap[1 + 2 * index])[-1] == Run.objects.get(pk=run.pk).cap
    for name in ("inflight", "tokens", "kv"):
        data = chart(page, name)
        assert len(data) == 1 + len(runs), name
        for index, run in enumerate(runs):
            assert known(data[1 + index]), (name, run.name)
    assert max(max(known(column)) for column in chart(page, "inflight")[1:]) > 0
    assert all(0 <= v <= 1 for column in chart(page, "kv")[1:] for v in known(column))
    for name, field in (("steps", "seconds"), ("reward", "reward_mean")):
        data = chart(page, name)
        assert data[0] == list(range(1, STEPS + 1)), name
        for index, run in enumerate(runs):
            records = StepRecord.objects.filter(run=run).order_by("step")
            assert data[1 + index] == pytest.approx([getattr(r, field) for r in records])

    # The step charts by the time since each run's start its steps were written.
    page.select_option("#step-axis", "elapsed")
    page.wait_for_function(
        "(n) => window.pacerPlots.reward.data[0].length === n", arg=STEPS * len(runs)
    )
    by_time = chart(page, "reward")
    for index, run in enumerate(runs):
        run.refresh_from_db()
        assert run.started_at is not None
        expected = [
            (r.written_at - run.started_at).total_seconds()
            for r in StepRecord.objects.filter(run=run).order_by("step")
        ]
        column = by_time[1 + index]
        at = [x for x, v in zip(by_time[0], column, strict=True) if v is not None]
        assert at == pytest.approx(expected, abs=1e-3), run.name
    page.select_option("#step-axis", "step")
    page.wait_for_function("(n) => window.pacerPlots.reward.data[0].length === n", arg=STEPS)
    path = screenshot(page, "compare-runs")
    print(f"\nscreenshot of three runs compared: {path}")


def test_the_wrong_runs_are_said_on_the_page(
    operator_page: Page, stack: Stack, finished_runs: list[Run]
) -> None:
    page = operator_page
    answer = page.goto(f"{stack.web.url}/compare/?runs={finished_runs[0].pk}")
    assert answer is not None and answer.status == 400
    expect(page.locator("#compare-refusal")).to_have_text("runs: compares 2 to 4 runs, got 1")
    missing = max(run.pk for run in finished_runs) + 100
    answer = page.goto(f"{stack.web.url}/compare/?runs={finished_runs[0].pk},{missing}")
    assert answer is not None and answer.status == 404
    expect(page.locator("#compare-refusal")).to_have_text(f"no such run: {missing}")
