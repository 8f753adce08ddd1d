"""Signing in and out, the runs list, and creating a run from the New run page: a bad
config first (its field error drawn at its line), then a good one that goes live."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from controlplane.runs.models import Run, RunState
from controlplane.runs.services import override_create
from tests.browser.conftest import PASSWORD, VIEWER, Stack, screenshot, signed_in_page

pytestmark = [pytest.mark.browser, pytest.mark.sqlite]


def test_sign_in_refuses_a_wrong_password_then_signs_in_and_out(
    browser: Browser, stack: Stack
) -> None:
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{stack.web.url}/")
    expect(page).to_have_url(re.compile(r"/signin/\?next=/$"))
    page.fill("#username", VIEWER)
    page.fill("#password", "not the password")
    page.click("#signin")
    expect(page.locator("#signin-error")).to_contain_text("do not match")
    page.fill("#password", PASSWORD)
    page.click("#signin")
    expect(page).to_have_url(f"{stack.web.url}/")
    expect(page.locator("#who")).to_have_text(VIEWER)
    expect(page.locator("#role")).to_have_text("viewer")
    expect(page.locator("#new-run")).to_have_count(0)  # a viewer starts no runs
    page.click("#signout")
    expect(page).to_have_url(re.compile(r"/signin/$"))
    page.goto(f"{stack.web.url}/")
    expect(page).to_have_url(re.compile(r"/signin/\?next=/$"))
    context.close()


def test_a_bad_config_is_refused_at_its_field_then_a_good_one_runs_live(
    operator_page: Page, stack: Stack, db_access: None
) -> None:
    page = operator_page
    page.click("#new-run")
    expect(page).to_have_url(re.compile(r"/runs/new/$"))
    page.select_option("#example", "multiturn")
    page.check('input[name="engine"][value="sim-engine-0"]')
    page.check('input[name="engine"][value="sim-engine-1"]')
    text = page.input_value("#config")
    assert 'name = "sim-engine-0"' in text and 'name = "sim-engine-1"' in text
    assert "127.0.0.1:8100" not in text  # the example's URLs gave way to the ticked engines
    text = text.replace("max_steps = 5", "max_steps = 400").replace(
        "poll_interval_s = 1.0", "poll_interval_s = 0.5\n\n[concurrency.pacer]\ntrim_kv_usage = 2.0"
    )
    page.fill("#config", text)
    page.click("#create")

    marked = page.locator("#editor-backdrop mark.err-line")
    expect(marked).to_have_count(1)
    expect(marked).to_have_text("trim_kv_usage = 2.0")  # the line that sets the field
    expect(page.locator("#editor-backdrop .err-msg")).to_contain_text(
        "concurrency.pacer.trim_kv_usage: must be in"
    )
    expect(page.locator("#field-errors li")).to_contain_text(["concurrency.pacer.trim_kv_usage"])
    screenshot(page, "new-run-field-error")
    assert not Run.objects.filter(name="multiturn").exists()

    page.fill("#config", text.replace("trim_kv_usage = 2.0", "trim_kv_usage = 0.95"))
    page.click("#create")
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"), timeout=30_000)
    run = Run.objects.get(name="multiturn")
    try:
        expect(page.locator("#live-status")).to_have_text("live")
        expect(page.locator('#timeline tr[data-kind="bootstrap"]')).to_have_count(1, timeout=60_000)
        expect(page.locator("#engine-table tbody tr")).to_have_count(2, timeout=30_000)
        expect(page.locator('#engine-table tr[data-engine="sim-engine-0/0"]')).to_be_visible()
        page.wait_for_function("() => window.pacerPlots.kv.data[0].length >= 3", timeout=30_000)
    finally:
        override_create(run=run, created_by=None, mode="stop", reason="test over")
    run.refresh_from_db()
    assert run.config["concurrency"]["pacer"]["trim_kv_usage"] == 0.95
    assert [e["name"] for e in run.config["engine"]] == ["sim-engine-0", "sim-engine-1"]
    assert run.state in (RunState.STOPPING, RunState.CANCELLED, RunState.RUNNING)


RECORD_CSP_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) =>
  window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}`));
"""


def test_every_page_keeps_to_the_content_security_policy_and_finds_all_it_asks_for(
    browser: Browser, stack: Stack, db_access: None
) -> None:
    run = Run.objects.create(name="csp-check", config={"name": "csp-check"})
    other = Run.objects.create(name="csp-other", config={"name": "csp-other"})
    context = browser.new_context()
    context.add_init_script(RECORD_CSP_VIOLATIONS)
    refused: list[str] = []
    context.on(
        "console",
        lambda message: (
            refused.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    missing: list[str] = []  # a script, a style or the icon the server answered with an error
    context.on(
        "response",
        lambda response: (
            missing.append(f"{response.status} {response.url}") if response.status >= 400 else None
        ),
    )
    page = context.new_page()
    pages = {
        "/admin/login/": "#id_username",
        "/signin/": "#username",
    }
    for path, shown in pages.items():
        answer = page.goto(f"{stack.web.url}{path}")
        assert (
            answer is not None and "script-src 'self'" in answer.headers["content-security-policy"]
        )
        expect(page.locator(shown)).to_be_visible()
        assert page.evaluate("() => window.cspViolations") == [], path
    page.fill("#username", "olga")
    page.fill("#password", PASSWORD)
    page.click("#signin")
    expect(page).to_have_url(f"{stack.web.url}/")
    # The icon (a browser asks for it outside what the page's responses show): the one the
    # dashboard names, and the one a page naming none (the admin's) is looked for at.
    named = page.locator("link[rel=icon]").get_attribute("href")
    for icon in (f"{stack.web.url}{named}", f"{stack.web.url}/favicon.ico"):
        answer = page.request.get(icon)
        assert answer.ok and answer.headers["content-type"] == "image/svg+xml", icon
    signed_in = {
        "/": "#runs tbody tr",
        "/runs/new/": "#config",
        "/alerts/": "#rules-card",
        "/pools/": "#pools-status[data-status='live']",
        f"/runs/{run.pk}/": "#live-status:text('live')",  # the websocket is connect-src 'self'
        f"/compare/?runs={run.pk},{other.pk}": "#compare-status[data-status='loaded']",
        "/api/docs/": ".swagger-ui .info",
    }
    for path, shown in signed_in.items():
        answer = page.goto(f"{stack.web.url}{path}")
        assert answer is not None and "content-security-policy" in answer.headers, path
        expect(page.locator(shown).first).to_be_visible()
        page.wait_for_timeout(300)  # late scripts (uPlot, the websocket, Swagger UI) have run
        assert page.evaluate("() => window.cspViolations") == [], path
    context.close()
    assert refused == []
    assert missing == []


def test_the_runs_list_shows_the_runs_with_their_cap_sparklines(
    browser: Browser, stack: Stack, db_access: None
) -> None:
    with signed_in_page(browser, stack, "olga") as page:
        expect(page.locator("#new-run")).to_be_visible()
        rows = page.locator("#runs tbody tr")
        expect(rows.first).to_be_visible()
        assert rows.count() == Run.objects.count()
        expect(page.locator("#runs .sparkline canvas").first).to_be_visible()
        screenshot(page, "runs-list")
