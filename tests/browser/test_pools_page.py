"""Runs that share engines, on the dashboard: the Pools page says what a pool is while there
is none, then lists two running runs' pool (from their claims, made in the database as their
hosts would write them) with the run that sizes it, each one's part of the pool and the KV
one of its episodes holds; a run's page draws its
ceiling on the cap chart from its share decisions, and an operator changes its share and
priority there (the command stored, the config changed with it). A viewer has no form."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from playwright.sync_api import Browser, expect

from controlplane.runs.models import CLAIM_TTL_S, Decision, Override, PoolClaim, Run, RunState
from tests.browser.conftest import OPERATOR, VIEWER, Stack, screenshot, signed_in_page
from tests.integration.hosting import run_document

pytestmark = [pytest.mark.browser, pytest.mark.sqlite]

CAPACITY = 300
# Each run's weight, and its ceiling at the pool's first split (above what either held: the
# caps stay under it) and at the next one, by weight.
RUNS = {"train": (1.5, 200, 180), "eval": (1.0, 200, 120)}
FOOTPRINTS = {"train": 812.4, "eval": None}  # KV tokens per episode; eval has not measured yet


@pytest.fixture
def sharing_runs(stack: Stack, db_access: None) -> Iterator[list[Run]]:
    """Two running runs on the stack's engines, held by a host that is not the stack's worker
    (a lease far off: no sweep takes them), each with a claim and the share decisions a host
    writes: a first ceiling, then the pool split anew by weight."""
    PoolClaim.objects.all().delete()
    now = timezone.now()
    engines = sorted(engine.url for engine in stack.engines)
    runs = []
    for name, (weight, first, second) in RUNS.items():
        document = run_document(stack.engines, name=name, max_steps=100_000)
        document["concurrency"]["max_inflight"] = CAPACITY
        run = Run.objects.create(
            name=name, config=document, state=RunState.RUNNING, cap=second,
            lease_owner="elsewhere", lease_expires_at=now + timedelta(hours=1),
        )  # fmt: skip
        PoolClaim.objects.create(
            run=run, engines=engines, weight=weight, priority=0, demand=CAPACITY,
            inflight=second - 10, max_inflight=CAPACITY, level=CAPACITY, ceiling=second,
            footprint=FOOTPRINTS[name], owner="elsewhere", updated_at=now, renew_s=5.0,
            since=now - timedelta(seconds=60 - len(runs)),  # train hosted first
        )  # fmt: skip
        for ago_s, before, after, ceiling in ((60, 100, 150, first), (20, 150, second, second)):
            Decision.objects.create(
                run=run, at=now - timedelta(seconds=ago_s), step=0, kind="share",
                cause="share", signal="soft", cap_before=before, cap_after=after,
                figures={"ceiling": ceiling, "inflight": after - 10},
                reason=f"Concurrency {before} -> {after} (share): ceiling {ceiling}",
            )  # fmt: skip
        runs.append(run)
    connection.close()
    yield runs
    PoolClaim.objects.all().delete()
    Run.objects.filter(pk__in=[run.pk for run in runs]).update(
        state=RunState.CANCELLED, lease_owner="", lease_expires_at=None
    )


def test_the_pools_page_explains_pools_while_there_is_none(
    browser: Browser, stack: Stack, db_access: None
) -> None:
    PoolClaim.objects.all().delete()
    connection.close()
    with signed_in_page(browser, stack, VIEWER) as page:
        page.click("nav >> text=Pools")
        expect(page.locator("#no-pools")).to_be_visible()
        expect(page.locator("#no-pools")).to_contain_text("no two running runs share an engine")
        expect(page.locator("#pools-status")).to_contain_text("updated")


def test_a_claim_its_host_renews_late_is_marked_overdue(
    browser: Browser, stack: Stack, sharing_runs: list[Run]
) -> None:
    late, on_time = sharing_runs[1], sharing_runs[0]
    now = timezone.now()
    # one renewed every second, last 8 s ago (counted for 12 s more); one renewed just now and
    # every 15 s, overdue in no less than 17 s however slow the page is to come
    PoolClaim.objects.filter(run=late).update(updated_at=now - timedelta(seconds=8), renew_s=1.0)
    PoolClaim.objects.filter(run=on_time).update(updated_at=now, renew_s=15.0)
    connection.close()
    with signed_in_page(browser, stack, VIEWER) as page:
        page.goto(f"{stack.web.url}/pools/")
        badge = page.locator(f"tr[data-run='{late.pk}'] .badge.overdue")
        expect(badge).to_have_text("overdue")
        expect(badge).to_have_attribute("title", re.compile("it may be dead"))
        expect(page.locator(".badge.overdue")).to_have_count(1)  # the other renews on time
        expect(page.locator("p.muted").first).to_contain_text(
            f"{CLAIM_TTL_S:.0f} seconds after its last renewal"
        )
        screenshot(page, "pools-overdue")


def test_two_sharing_runs_show_in_one_pool_and_an_operator_changes_a_share(
    browser: Browser, stack: Stack, sharing_runs: list[Run]
) -> None:
    evaluation = sharing_runs[1]
    with signed_in_page(browser, stack, OPERATOR) as page:
        page.goto(f"{stack.web.url}/pools/")
        card = page.locator("section.pool")
        expect(card).to_have_count(1)
        expect(card.locator("h2")).to_contain_text(stack.engines[0].url.split("//")[1])
        expect(card.locator(".level")).to_have_text(str(CAPACITY))
        leader = card.locator("tr[data-leader]")  # train was hosted first: it sizes the pool
        expect(leader).to_have_attribute("data-run", str(sharing_runs[0].pk))
        expect(leader).to_contain_text("sizes the pool")
        expect(card.locator("td.footprint")).to_have_text(["812", "\u2013"])
        for run, (_, _, ceiling) in zip(sharing_runs, RUNS.values(), strict=True):
            row = card.locator(f"tr[data-run='{run.pk}']")
            expect(row.locator("td.ceiling")).to_have_text(str(ceiling))
            expect(row.locator("td.share")).to_contain_text(f"{100 * ceiling / CAPACITY:.1f}%")
            expect(row.locator("a")).to_have_attribute("href", f"/runs/{run.pk}/")
        expect(page.locator("#no-pools")).to_be_hidden()
        screenshot(page, "pools")

        page.click(f"tr[data-run='{evaluation.pk}'] a")
        page.wait_for_url(f"**/runs/{evaluation.pk}/")
        page.wait_for_function("() => window.pacerMetrics.backfills >= 1", timeout=20_000)
        ceilings = page.evaluate("() => Array.from(window.pacerPlots.cap.data[5])")
        assert [v for v in ceilings if v is not None] == [200, 120], ceilings
        assert page.evaluate("() => window.pacerPlots.cap.series[5].label") == "pool ceiling"
        train = sharing_runs[0]
        expect(page.locator("#pool-line")).to_have_text(
            f"Engines shared: this run holds 110 of its part 120; run {train.pk} (train) holds "
            f"170 of its part 180. The pool's level is {CAPACITY}, sized by run {train.pk}. "
            "See the pools."
        )

        page.fill("#share-weight", "0")
        page.click("#share-set")
        expect(page.locator("#share-error")).to_contain_text("Give a share: a weight above 0")
        page.fill("#share-weight", "5000")
        page.click("#share-set")
        expect(page.locator("#share-error")).to_contain_text("Share not changed:")
        expect(page.locator("#share-error")).to_contain_text("1000")
        assert not Override.objects.filter(run=evaluation).exists()

        page.fill("#share-weight", "3")
        page.fill("#share-priority", "1")
        page.fill("#share-reason", "the eval run is due")
        page.click("#share-set")
        expect(page.locator("#share-log li").first).to_contain_text("share 3, priority 1")
        expect(page.locator("#share-error")).to_be_hidden()
        override = Override.objects.get(run=evaluation)
        assert (override.mode, override.share, override.priority) == ("share", 3.0, 1)
        assert override.reason == "the eval run is due"
        assert override.created_by.username == OPERATOR  # type: ignore[union-attr]
        evaluation.refresh_from_db()
        concurrency = evaluation.config["concurrency"]
        assert (concurrency["share"], concurrency["priority"]) == (3.0, 1)
        screenshot(page, "pools-run-share")
    connection.close()


def test_a_viewer_sees_the_pool_but_no_share_form(
    browser: Browser, stack: Stack, sharing_runs: list[Run]
) -> None:
    with signed_in_page(browser, stack, VIEWER) as page:
        page.goto(f"{stack.web.url}/pools/")
        expect(page.locator("section.pool tbody tr")).to_have_count(2)
        page.goto(f"{stack.web.url}/runs/{sharing_runs[0].pk}/")
        expect(page.locator("#run-state")).to_have_text("running")
        assert page.locator("#share-panel").count() == 0
