"""The Alerts page: an operator adds a rule (a wrong URL refused first, at its field), sees
the conditions holding and the deliveries with their answers, and removes the rule; a
viewer sees the same tables and no form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Browser, expect

from controlplane.alerts.models import AlertEpisode, AlertRule, Delivery
from controlplane.runs.models import Run
from tests.browser.conftest import VIEWER, Stack, screenshot, signed_in_page

pytestmark = [pytest.mark.browser, pytest.mark.sqlite]


def test_an_operator_adds_and_removes_a_rule_and_reads_its_deliveries(
    browser: Browser, stack: Stack, db_access: None
) -> None:
    AlertRule.objects.all().delete()
    with signed_in_page(browser, stack, "olga") as page:
        page.click("text=Alerts")
        expect(page.locator("#no-rules")).to_be_visible()
        page.fill("#new-rule input[name=name]", "on-call")
        page.fill("#new-rule input[name=url]", "ftp://hooks.example/x")
        page.uncheck("#new-rule input[value=run_idle]")
        page.click("#add-rule")
        expect(page.locator("#rule-error")).to_contain_text("url: must be an http or https URL")
        assert not AlertRule.objects.exists()
        page.fill("#new-rule input[name=url]", "https://hooks.example/T/B/X")
        page.select_option("#new-rule select[name=body_format]", "slack")
        page.click("#add-rule")
        expect(page.locator("#rules tbody tr")).to_have_count(1)
        rule = AlertRule.objects.get()
        assert rule.body_format == "slack" and "run_idle" not in rule.kinds
        assert len(rule.kinds) == 6 and rule.created_by.username == "olga"  # type: ignore[union-attr]

        run = Run.objects.create(name="watched", config={"name": "watched"}, state="running")
        now = datetime.now(UTC)
        down = AlertEpisode.objects.create(
            rule=rule, run=run, kind="engine_down", key="sim-engine-1",
            summary=f"run {run.pk} (watched): sim-engine-1 has been down for 75 s",
            opened_at=now - timedelta(seconds=15),
        )  # fmt: skip
        Delivery.objects.create(
            episode=down, event="fired", url=rule.url, body={"text": "x"}, next_attempt_at=now,
            state="delivered", attempts=1, status_code=200, answer="200 OK", delivered_at=now,
        )  # fmt: skip
        Delivery.objects.create(
            episode=down, event="fired", url="https://hooks.example/down", body={"text": "x"},
            next_attempt_at=now + timedelta(seconds=10), state="pending", attempts=2,
            answer="ConnectError: [Errno 111] Connection refused",
        )  # fmt: skip
        open_rows = page.locator("#open-episodes tbody tr")
        expect(open_rows).to_have_count(1, timeout=15_000)  # the page's refresh brings them
        expect(open_rows.first).to_contain_text("sim-engine-1 has been down for 75 s")
        deliveries = page.locator("#deliveries tbody tr")
        expect(deliveries).to_have_count(2, timeout=15_000)
        expect(deliveries.filter(has_text="pending")).to_contain_text("Connection refused")
        expect(deliveries.filter(has_text="delivered")).to_contain_text("200 OK")
        screenshot(page, "alerts")

        page.click(f"#rules tr[data-rule='{rule.pk}'] .remove-rule")
        expect(page.locator("#no-rules")).to_be_visible()
        assert not AlertRule.objects.exists()
        run.delete()


def test_a_viewer_sees_the_rules_but_no_form(
    browser: Browser, stack: Stack, db_access: None
) -> None:
    AlertRule.objects.all().delete()
    AlertRule.objects.create(name="team", url="https://hooks.example/team")
    with signed_in_page(browser, stack, VIEWER) as page:
        page.goto(f"{stack.web.url}/alerts/")
        expect(page.locator("#rules tbody tr")).to_contain_text("team")
        assert page.locator("#new-rule").count() == 0
        assert page.locator(".remove-rule").count() == 0
    AlertRule.objects.all().delete()
