"""The run page against a live run: charts and timeline moving, a pin moving the cap and
showing the policy's shadow line, release, the click-to-decision latency, a viewer's disabled
panel, a web server restart the page rides out with no gap and no duplicate, and stop."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from channels_redis.core import RedisChannelLayer
from django.contrib.auth import get_user_model
from django.db import connection
from playwright.sync_api import Page, Route, expect

from controlplane.runs.models import Decision, EngineSample, Run
from controlplane.runs.services import override_create, run_create
from tests.browser.conftest import OPERATOR, Stack, screenshot
from tests.integration.hosting import run_document, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.sqlite]

POLL_S = 0.5
FIRST_BIN_S = 2.0
LATENCY_CLICKS = 20

# Records each class the override log's entries take, in order, so a state that lasts
# only until the run answers is seen however fast the answer comes.
OBSERVE_LOG_CLASSES = """() => {
  window.ovLogClasses = [];
  const log = document.querySelector("#ov-log");
  new MutationObserver((changes) => {
    for (const change of changes) {
      const nodes = change.type === "childList" ? [...change.addedNodes] : [change.target];
      for (const node of nodes) if (node.tagName === "LI") window.ovLogClasses.push(node.className);
    }
  }).observe(log, { childList: true, subtree: true, attributes: true, attributeFilter: ["class"] });
}"""


@pytest.fixture(scope="module")
def live_run(stack: Stack, django_db_blocker: Any) -> Iterator[Run]:
    """A long run on the registered simulator engines, created as the operator would."""
    document = run_document(
        stack.engines, name="browser-live", max_steps=100_000, group_size=4, batch_size=16
    )
    document["engine"] = [{"name": "sim-engine-0"}, {"name": "sim-engine-1"}]
    document["concurrency"]["poll_interval_s"] = POLL_S
    with django_db_blocker.unblock():
        owner = get_user_model().objects.get(username=OPERATOR)
        # The stack's engines answer already; preflight's asyncio.run cannot run beside
        # Playwright's event loop.
        run = run_create(document=document, created_by=owner, check_engines=False)
        wait_for(lambda: Decision.objects.filter(run=run).exists(), 60, "the first decision")
        connection.close()
    yield run
    with django_db_blocker.unblock():
        run.refresh_from_db()
        if not run.is_ended:
            override_create(run=run, created_by=None, mode="stop", reason="module done")
        connection.close()


def open_run(page: Page, stack: Stack, run: Run) -> None:
    page.goto(f"{stack.web.url}/runs/{run.pk}/")
    expect(page.locator("#live-status")).to_have_text("live")
    page.wait_for_function("() => window.pacerMetrics.backfills >= 1")


def chart(page: Page, name: str) -> list[list[float | None]]:
    return page.evaluate(f"() => window.pacerPlots.{name}.data.map((column) => Array.from(column))")


def command(page: Page, mode: str, *, cap: int | None = None, reason: str = "browser test") -> None:
    """Click a command and wait until the panel says what came of it."""
    before = page.locator("#ov-log li").count()
    page.fill("#ov-reason", reason)
    if cap is not None:
        page.fill("#ov-cap", str(cap))
    page.click(f"#cmd-{mode}")
    expect(page.locator("#ov-log li")).to_have_count(before + 1)
    expect(page.locator("#ov-log li").first).to_have_class("applied", timeout=30_000)


def last_value(column: list[float | None]) -> float | None:
    known = [v for v in column if v is not None]
    return known[-1] if known else None


def test_the_cap_chart_and_the_timeline_move_live(
    operator_page: Page, stack: Stack, live_run: Run
) -> None:
    page = operator_page
    open_run(page, stack, live_run)
    expect(page.locator('#timeline tr[data-kind="bootstrap"]')).to_have_count(1)
    first = chart(page, "cap")
    page.wait_for_function(
        f"() => window.pacerPlots.cap.data[0].length >= {len(first[0]) + 6}", timeout=20_000
    )
    second = chart(page, "cap")
    assert second[0][-1] > first[0][-1]  # newer points arrived over the websocket
    assert sorted(set(second[0])) == second[0]  # one row per time, in order
    kv = chart(page, "kv")
    assert len(kv) == 1 + 1 + 2 + 3  # x, max KV, two engines, the trim/shed/top lines
    assert {v for v in kv[-3] if v is not None} == {0.92}  # the policy's default trim line
    expect(page.locator("#engine-table tbody tr")).to_have_count(2)
    expect(page.locator("#engine-table .health-up").first).to_be_visible()
    page.wait_for_function(  # the run's own episodes on its engines, from the live polls
        """() => [...document.querySelectorAll("#engine-table td.this-run")]
            .reduce((total, td) => total + (Number(td.textContent) || 0), 0) > 0""",
        timeout=20_000,
    )
    expect(page.locator("#pool-line")).to_be_hidden()  # it shares its engines with no run
    rows = page.locator("#timeline tbody tr").count()
    page.select_option("#timeline-kind", "bootstrap")
    expect(page.locator("#timeline tbody tr:visible")).to_have_count(1)
    page.select_option("#timeline-kind", "")
    assert page.locator("#timeline tbody tr:visible").count() >= rows


def test_a_pin_moves_the_cap_shows_the_shadow_line_and_release_ends_it(
    operator_page: Page, stack: Stack, live_run: Run, db_access: None
) -> None:
    page = operator_page
    open_run(page, stack, live_run)
    live_run.refresh_from_db()
    pinned = 3 if (live_run.cap or 0) > 3 else 5
    page.fill("#ov-ttl", "600")
    command(page, "pin", cap=pinned, reason="KV experiment")
    pin_row = page.locator('#timeline tr[data-kind="pin"]').first
    expect(pin_row).to_contain_text(f"→ {pinned}")
    expect(pin_row).to_contain_text("KV experiment")
    page.wait_for_function(  # a few polls while pinned: the policy's own cap differs
        "(pinned) => window.pacerPlots.cap.data[2]"
        ".filter((v) => v !== null && v !== pinned).length >= 3",
        arg=pinned,
        timeout=30_000,
    )
    data = chart(page, "cap")
    assert last_value(data[1]) == pinned  # the cap line moved to the pin
    assert last_value(data[2]) not in (None, pinned)  # the shadow line: what the policy wants
    path = screenshot(page, "run-detail-pinned")
    print(f"\nscreenshot during a pin: {path}")

    command(page, "release", reason="done")
    expect(page.locator('#timeline tr[data-kind="release"]').first).to_be_visible()
    page.wait_for_function(  # polls after the release carry no shadow
        "() => window.pacerPlots.cap.data[2].slice(-4).every((v) => v === null)",
        timeout=30_000,
    )
    applied = [o.decision.kind for o in live_run.overrides.exclude(decision=None)]
    assert applied[-2:] == ["pin", "release"]


def test_click_to_decision_latency_over_twenty_clicks(
    operator_page: Page, stack: Stack, live_run: Run
) -> None:
    page = operator_page
    open_run(page, stack, live_run)
    for index in range(LATENCY_CLICKS):
        command(page, "set", cap=8 + 2 * (index % 2), reason=f"latency {index}")
    page.wait_for_function(
        f"() => window.pacerMetrics.clickToDecisionMs.length >= {LATENCY_CLICKS}"
    )
    clicks = page.evaluate("() => window.pacerMetrics.clickToDecisionMs")
    delivery = page.evaluate("() => window.pacerMetrics.deliveryMs")
    click_median = statistics.median(clicks)
    delivery_median = statistics.median(delivery)
    delivery_p95 = statistics.quantiles(delivery, n=20)[-1]
    print(
        f"\nclick to decision drawn, {len(clicks)} clicks: median {click_median:.0f} ms, "
        f"min {min(clicks):.0f} ms, max {max(clicks):.0f} ms"
        f"\nwebsocket delivery (decision made -> received in the browser), {len(delivery)} "
        f"decisions: median {delivery_median:.0f} ms, p95 {delivery_p95:.0f} ms"
    )
    assert page.locator('#timeline tr[data-kind="set"]').count() >= LATENCY_CLICKS
    assert click_median < 3000  # the worker wakes on pub/sub, not on its next recheck


# What answers in the API's place when something in front of it or under it fails: Django's
# debug page (a 500 with DEBUG on, as the quick start has it) and a proxy's error page.
DEBUG_PAGE = (
    "<!DOCTYPE html><html><head><title>OperationalError at /api/runs/1/override/</title>"
    "</head><body><h1>OperationalError</h1><pre>database is locked</pre>"
    + "<p>Traceback (most recent call last)</p>" * 200
    + "</body></html>"
)
PROXY_PAGE = "<html><body><center><h1>502 Bad Gateway</h1></center><hr>nginx</body></html>"


def answering(status: int, body: str) -> Callable[[Route], None]:
    """A route handler that answers in the server's place with an HTML page."""
    return lambda route: route.fulfill(status=status, content_type="text/html", body=body)


def test_an_answer_that_is_not_the_apis_is_one_sentence_and_the_panel_stays_usable(
    operator_page: Page, stack: Stack, live_run: Run
) -> None:
    page = operator_page
    open_run(page, stack, live_run)
    override = f"**/api/runs/{live_run.pk}/override/"
    error = page.locator("#ov-error")
    for status, body in ((500, DEBUG_PAGE), (502, PROXY_PAGE)):
        page.route(override, answering(status, body))
        page.fill("#ov-reason", "behind a proxy")
        page.fill("#ov-cap", "12")
        page.click("#cmd-pin")
        expect(error).to_be_visible()
        expect(error).to_contain_text(f"Pin not applied: the server answered {status}")
        text = error.text_content() or ""
        assert "<" not in text and "database is locked" not in text and "nginx" not in text
        assert len(text) < 200, text
        expect(page.locator("#cmd-pin")).to_be_enabled()
        page.unroute(override)
    page.route(override, lambda route: route.abort())
    page.click("#cmd-set")
    expect(error).to_have_text("Set once not applied: the server could not be reached.")
    page.unroute(override)
    path = screenshot(page, "run-detail-proxy-error")
    print(f"\nscreenshot of the panel after a proxy's error: {path}")
    command(page, "set", cap=12, reason="through again")  # the panel still sends and hears
    expect(error).to_be_hidden()


def test_a_viewer_sees_the_panel_disabled_and_cannot_override(
    viewer_page: Page, stack: Stack, live_run: Run, db_access: None
) -> None:
    page = viewer_page
    open_run(page, stack, live_run)
    expect(page.locator("#override-disabled")).to_be_visible()
    expect(page.locator("#override-disabled")).to_contain_text("viewer")
    expect(page.locator("#override-controls")).to_have_attribute("disabled", "")
    expect(page.locator("#cmd-pin")).to_be_disabled()
    overrides = live_run.overrides.count()
    status = page.evaluate(
        """async (url) => {
            const token = document.cookie.match(/csrftoken=([^;]+)/)[1];
            const response = await fetch(url, {method: "POST", headers: {"Content-Type":
                "application/json", "X-CSRFToken": token}, body: JSON.stringify({mode: "set",
                cap: 9, reason: "sneaky"})});
            return response.status;
        }""",
        f"/api/runs/{live_run.pk}/override/",
    )
    assert status == 403
    assert live_run.overrides.count() == overrides


def test_a_quiet_run_page_keeps_its_one_websocket(
    operator_page: Page, stack: Stack, db_access: None
) -> None:
    """A run that sends nothing (not started yet) leaves its page's websocket open, through
    stretches longer than the Channels layer's wait for an event."""
    page = operator_page
    run = Run.objects.create(name="quiet-page", config={"name": "quiet-page"})
    page.goto(f"{stack.web.url}/runs/{run.pk}/")
    expect(page.locator("#live-status")).to_have_text("live")
    page.wait_for_timeout((RedisChannelLayer.brpop_timeout * 2 + 2) * 1000)
    assert page.evaluate("() => window.pacerMetrics.opens") == 1
    expect(page.locator("#live-status")).to_have_text("live")


def test_the_page_reconnects_after_a_web_server_restart_and_backfills_without_gap_or_duplicate(
    operator_page: Page, stack: Stack, live_run: Run, db_access: None
) -> None:
    page = operator_page
    open_run(page, stack, live_run)
    page.wait_for_function("() => window.pacerPlots.kv.data[0].length >= 4", timeout=20_000)
    stack.web.stop()
    expect(page.locator("#live-status")).to_contain_text("reconnecting")
    # A decision made while the page has no socket: only the backfill can bring it.
    missed = override_create(run=live_run, created_by=None, mode="set", cap=12, reason="outage")
    wait_for(lambda: Decision.objects.filter(override=missed).exists(), 30, "the set decision")
    missed_id = Decision.objects.get(override=missed).pk
    stack.web.start()
    expect(page.locator("#live-status")).to_have_text("live", timeout=30_000)
    page.wait_for_function(
        "() => window.pacerMetrics.opens >= 2 && window.pacerMetrics.backfills >= 2"
    )
    expect(page.locator(f'#timeline tr[data-id="{missed_id}"]')).to_have_count(1)
    page.wait_for_timeout(3 * POLL_S * 1000)  # live polls after the reconnect

    shown = [
        int(i)
        for i in page.eval_on_selector_all(
            "#timeline tbody tr", "rows => rows.map(r => r.dataset.id)"
        )
    ]
    assert len(shown) == len(set(shown))  # no decision twice
    stored = set(
        Decision.objects.filter(run=live_run, pk__gte=min(shown)).values_list("pk", flat=True)
    )
    newest_shown = max(shown)
    assert {pk for pk in stored if pk <= newest_shown} == set(shown)  # none missing

    times = chart(page, "kv")[0]
    assert times == sorted(set(times))  # no sample twice
    # No gap the database does not have: every stored poll in the chart's span is drawn, live
    # at its own time or in a backfilled bin (the first backfill's bins are 2 s: the 30-minute
    # window in at most 1000 points), and the chart reaches past the reconnect.
    stored = sorted(
        {
            s.at.timestamp()
            for s in EngineSample.objects.filter(
                run=live_run, at__gte=datetime.fromtimestamp(times[0], UTC)
            )
        }
    )
    undrawn = [
        at
        for at in stored
        if at <= times[-1] and not any(at - FIRST_BIN_S < t <= at + 0.001 for t in times)
    ]
    assert not undrawn, f"{len(undrawn)} stored polls not drawn, the first at {undrawn[0]:.1f}"
    assert times[-1] > missed.created_at.timestamp()
    screenshot(page, "run-detail-after-reconnect")


def test_stop_ends_the_run_and_the_page_says_so(
    operator_page: Page, stack: Stack, live_run: Run, db_access: None
) -> None:
    page = operator_page
    open_run(page, stack, live_run)
    page.fill("#ov-reason", "end of the browser tests")
    page.evaluate(OBSERVE_LOG_CLASSES)  # the pending state may last only a few milliseconds
    page.click("#cmd-stop")
    page.wait_for_function("() => window.ovLogClasses.includes('applied')", timeout=60_000)
    classes = page.evaluate("() => window.ovLogClasses")
    assert classes.index("pending") < classes.index("applied"), classes
    expect(page.locator("#ended-banner")).to_be_visible(timeout=60_000)
    expect(page.locator("#ended-state")).to_have_text("cancelled")
    expect(page.locator("#live-status")).to_have_text("run ended")
    expect(page.locator("#override-controls")).to_have_attribute("disabled", "")
    expect(page.locator("#override-disabled")).to_contain_text("has ended")
    expect(page.locator("#ov-log li").first).to_have_class("applied")
    live_run.refresh_from_db()
    assert live_run.state == "cancelled"
    screenshot(page, "run-detail-ended")
