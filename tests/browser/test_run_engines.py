"""Engines joining and leaving a hosted run from its page: an operator adds a registered
simulator engine by name (it takes episodes at once, an ``engine-join`` row in the timeline),
removes one of the run's engines through its row's Remove button after confirming a short
drain (the row says "draining", then goes), and a URL where nothing listens is refused in
the API's own words next to the control. A viewer sees neither the control nor the buttons."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from playwright.sync_api import Dialog, Page, expect

from controlplane.runs.models import Decision, Run
from controlplane.runs.services import engine_register, override_create, run_create
from tests.browser.conftest import OPERATOR, Stack, screenshot
from tests.conftest import free_port
from tests.integration.hosting import SimEngine, run_document, sim_engines, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.sqlite]

JOINING = "join-engine-0"
LEAVING = "sim-engine-0"
DRAIN_S = 3

# Every text the rows' standing lines take, in order, so "draining", which lasts as long as
# the engine's episodes do, is seen however the test's own waits fall.
OBSERVE_STANDINGS = """() => {
  window.standings = [];
  const body = document.querySelector("#engine-table tbody");
  const record = () => {
    for (const row of body.rows) {
      const standing = row.querySelector(".standing");
      window.standings.push(`${row.dataset.engine} ${standing?.textContent ?? ""}`);
    }
  };
  const watched = { childList: true, subtree: true, characterData: true };
  new MutationObserver(record).observe(body, watched);
  record();
}"""

# What the API answers a POST of ``engine`` to the run's engines, through the page's session.
REFUSAL = """async ([url, engine]) => {
  const token = document.cookie.match(/csrftoken=([^;]+)/)[1];
  const response = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json",
    "X-CSRFToken": token }, body: JSON.stringify({ engine }) });
  return { status: response.status, body: await response.json() };
}"""


@pytest.fixture(scope="module")
def joining_engine(
    stack: Stack, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SimEngine]:
    """A simulator engine of this module's own, registered, in no run yet."""
    with sim_engines(tmp_path_factory.mktemp("joining"), 1) as (engine,):
        with django_db_blocker.unblock():
            engine_register(name=JOINING, url=engine.url)
            connection.close()
        yield engine


@pytest.fixture(scope="module")
def pool_run(stack: Stack, joining_engine: SimEngine, django_db_blocker: Any) -> Iterator[Run]:
    document = run_document(
        stack.engines, name="browser-engines", max_steps=100_000, group_size=4, batch_size=16
    )
    document["engine"] = [{"name": "sim-engine-0"}, {"name": "sim-engine-1"}]
    document["concurrency"]["initial_inflight"] = 16
    with django_db_blocker.unblock():
        owner = get_user_model().objects.get(username=OPERATOR)
        run = run_create(document=document, created_by=owner, check_engines=False)
        wait_for(lambda: Decision.objects.filter(run=run).exists(), 60, "the first decision")
        connection.close()
    yield run
    with django_db_blocker.unblock():
        run.refresh_from_db()
        if not run.is_ended:
            override_create(run=run, created_by=None, mode="stop", reason="module done")
        # Ended before the joining engine goes, so it stops as told, not on an engine gone.
        wait_for(lambda: Run.objects.get(pk=run.pk).is_ended, 60, "the run to stop")
        connection.close()


def open_run(page: Page, stack: Stack, run: Run) -> None:
    page.goto(f"{stack.web.url}/runs/{run.pk}/")
    expect(page.locator("#live-status")).to_have_text("live")
    page.wait_for_function("() => window.pacerMetrics.backfills >= 1")


def row(page: Page, name: str) -> Any:
    return page.locator(f'#engine-table tr[data-engine^="{name}"]')


def test_an_engine_added_and_one_removed_through_the_run_page(
    operator_page: Page, stack: Stack, pool_run: Run, db_access: None
) -> None:
    page = operator_page
    run = pool_run
    open_run(page, stack, run)
    expect(page.locator("#engine-table tbody tr")).to_have_count(2)
    options = page.locator("#registered-engines option")
    assert JOINING in [options.nth(i).get_attribute("value") for i in range(options.count())]

    # Added by its registered name: pending, then applied with the join decision's words.
    page.fill("#engine-add", JOINING)
    page.click("#engine-add-button")
    entry = page.locator("#engine-log li").first
    expect(entry).to_have_class("applied", timeout=30_000)
    expect(entry).to_contain_text(f"add {JOINING} — {JOINING} joined the run")
    expect(page.locator("#engine-error")).to_be_hidden()
    expect(page.locator("#engine-add")).to_have_value("")
    # In the table, with episodes on it (its Run column), and in the timeline.
    expect(row(page, JOINING)).to_have_count(1, timeout=30_000)
    page.wait_for_function(
        """(name) => [...document.querySelectorAll("#engine-table tbody tr")].some((tr) =>
            tr.dataset.engine.startsWith(name) && Number(tr.cells[5].textContent) > 0)""",
        arg=JOINING,
        timeout=30_000,
    )
    join = page.locator('#timeline tr[data-kind="engine-join"]')
    expect(join).to_have_count(1)
    expect(join).to_contain_text(f"{JOINING} joined the run: it takes new groups now")
    expect(join.locator(".badge")).to_have_css("background-color", "rgb(52, 64, 84)")
    expect(page.locator('#timeline tr[data-kind="rescale"]').first).to_contain_text(
        f"{JOINING} joined", timeout=30_000
    )

    # Removed through its row's button, the drain confirmed: "draining", then gone.
    page.evaluate(OBSERVE_STANDINGS)
    page.fill("#engine-drain", str(DRAIN_S))
    asked: list[str] = []

    def confirm(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", confirm)
    row(page, LEAVING).locator("button.remove-engine").click()
    expect(page.locator("#engine-log li").first).to_contain_text(
        f"remove {LEAVING} (drain {DRAIN_S} s) — {LEAVING} leaves the run", timeout=30_000
    )
    assert asked and f"the episodes on it have {DRAIN_S} s to finish" in asked[0], asked
    expect(page.locator('#timeline tr[data-kind="engine-leave"]')).to_contain_text(
        f"{LEAVING} left the run", timeout=30_000
    )
    expect(row(page, LEAVING)).to_have_count(0, timeout=30_000)
    seen = [text for text in page.evaluate("() => window.standings") if text.startswith(LEAVING)]
    draining = [i for i, text in enumerate(seen) if "draining" in text]
    assert draining and "Remove" in seen[0], seen
    expect(page.locator('#timeline tr[data-kind="engine-drain"]')).to_contain_text(
        f"{LEAVING} leaves the run: no new groups"
    )
    expect(page.locator("#engine-table tbody tr")).to_have_count(2)
    assert set(page.locator("#engine-table tbody tr .standing").all_text_contents()) == {"Remove"}

    # A URL where nothing listens: refused, in the API's words, and nothing changes.
    dead = f"http://127.0.0.1:{free_port()}"
    refused = page.evaluate(REFUSAL, [f"/api/runs/{run.pk}/engines/", dead])
    assert refused["status"] == 400, refused
    message = " ".join(refused["body"]["errors"]["engine"])
    page.fill("#engine-add", dead)
    page.click("#engine-add-button")
    error = page.locator("#engine-error")
    expect(error).to_be_visible(timeout=30_000)
    expect(error).to_have_text(f"{dead} not added: {message}")
    expect(page.locator("#engine-add-button")).to_be_enabled()
    path = screenshot(page, "run-engines")
    print(f"\nscreenshot of the engines joined and left: {path}")

    # A fresh load: the same engines, the decisions in the timeline.
    page.reload()
    expect(page.locator("#live-status")).to_have_text("live")
    expect(row(page, JOINING)).to_have_count(1)
    expect(row(page, LEAVING)).to_have_count(0)
    for kind in ("engine-join", "engine-drain", "engine-leave"):
        expect(page.locator(f'#timeline tr[data-kind="{kind}"]')).to_have_count(1)
    # What the table marks a draining or gone engine by from the first paint, however old.
    changes = page.evaluate(
        """() => JSON.parse(document.getElementById("page-data").textContent).engine_changes"""
    )
    assert {name: d["kind"] for name, d in changes.items()} == {
        JOINING: "engine-join",
        LEAVING: "engine-leave",
    }


def test_a_viewer_sees_no_engine_control(
    viewer_page: Page, stack: Stack, pool_run: Run, db_access: None
) -> None:
    page = viewer_page
    open_run(page, stack, pool_run)
    expect(page.locator("#engine-table tbody tr").first).to_be_visible()
    expect(page.locator("#engine-controls")).to_have_count(0)
    expect(page.locator("#registered-engines")).to_have_count(0)
    expect(page.locator("button.remove-engine")).to_have_count(0)
    expect(page.locator("#engine-table .standing")).to_have_count(0)
