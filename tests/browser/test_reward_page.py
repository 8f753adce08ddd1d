"""The run page of a run whose trainer sends weights back: a hosted run on simulated engines
serving vLLM's weight routes, each step acknowledged with a checkpoint so the relay brings
both engines to it (sync: paused together). The page draws a point per written step on the
reward chart with the step's mean reward, its std band and its policy version, live as the
steps come; a shaded span per engine's update on the time charts, hovered for its reason;
and the engine table's Version column says "updating" during a pause and the acknowledged
version after it, on a fresh page load too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from playwright.sync_api import Page, expect
from rest_framework.authtoken.models import Token

from controlplane.runs.models import Decision, Run, StepRecord
from controlplane.runs.services import engine_register, override_create, run_create
from tests.browser.conftest import OPERATOR, Stack, screenshot
from tests.integration.hosting import SimEngine, run_document, sim_engines, wait_for
from tests.model_folders import model_folder
from workers.core.decisions import DecisionKind

pytestmark = [pytest.mark.browser, pytest.mark.sqlite]

ACKED = 3  # steps acknowledged with a checkpoint; the run then writes one more and waits
RELOAD_S = 1.5  # each engine's reload: three polls of the run fall in every pause
POLL_S = 0.5
NAMES = ("dev-engine-0", "dev-engine-1")

# Every text the Version column's cells take, in order, so "updating", which lasts only as
# long as a pause, is seen however the test's own waits fall.
OBSERVE_VERSIONS = """() => {
  window.versionTexts = [];
  const body = document.querySelector("#engine-table tbody");
  const record = () => {
    for (const cell of body.querySelectorAll("td.version")) {
      window.versionTexts.push(cell.textContent);
    }
  };
  const watched = { childList: true, subtree: true, characterData: true };
  new MutationObserver(record).observe(body, watched);
  record();
}"""


@pytest.fixture(scope="module")
def dev_engines(
    stack: Stack, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[SimEngine]]:
    """Two simulator engines of this module's own with the weight routes on, registered."""
    folder = tmp_path_factory.mktemp("dev-engines")
    dev = {"VLLM_SERVER_DEV_MODE": "1"}
    with sim_engines(folder, 2, "--reload-s", str(RELOAD_S), env=dev) as engines:
        with django_db_blocker.unblock():
            for name, engine in zip(NAMES, engines, strict=True):
                engine_register(name=name, url=engine.url)
            connection.close()
        yield engines


@pytest.fixture(scope="module")
def trained_run(
    stack: Stack, dev_engines: list[SimEngine], django_db_blocker: Any
) -> Iterator[Run]:
    document = run_document(
        dev_engines, name="browser-rewards", max_steps=100, group_size=4, batch_size=16
    )
    document["engine"] = [{"name": name} for name in NAMES]
    # Answers of varied lengths, so rewards vary within a step: a std band to draw.
    lengths = {"kind": "uniform", "low": 4, "high": 48}
    document["env"][0]["args"]["completion_tokens"] = lengths
    document["concurrency"]["poll_interval_s"] = POLL_S
    document["trainer"] = {"mode": "external", "ack_timeout_s": 300, "updates": "sync"}
    with django_db_blocker.unblock():
        owner = get_user_model().objects.get(username=OPERATOR)
        run = run_create(document=document, created_by=owner, check_engines=False)
        connection.close()
    yield run
    with django_db_blocker.unblock():
        run.refresh_from_db()
        if not run.is_ended:
            override_create(run=run, created_by=None, mode="stop", reason="module done")
        # Ended before its engines go, so it stops as told, not on engines gone.
        wait_for(lambda: Run.objects.get(pk=run.pk).is_ended, 60, "the run to stop")
        connection.close()


def chart(page: Page, name: str) -> list[list[float | None]]:
    return page.evaluate(f"() => window.pacerPlots.{name}.data.map((column) => Array.from(column))")


def ack(stack: Stack, token: str, run: Run, step: int) -> None:
    """The trainer's acknowledgement of ``step`` through the web server: version ``step``,
    with a checkpoint folder in the run's own folder."""
    run.refresh_from_db()
    checkpoint = model_folder(Path(run.output_dir) / "checkpoints" / f"v{step}")
    answer = httpx.post(
        f"{stack.web.url}/api/runs/{run.pk}/steps/{step}/ack/",
        json={"policy_version": step, "checkpoint": str(checkpoint)},
        headers={"Authorization": f"Token {token}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text


def updates_done(run: Run, version: int) -> list[Decision]:
    """The run's weights decisions once each engine has one for ``version``."""
    decisions = list(Decision.objects.filter(run=run, kind=DecisionKind.WEIGHTS.value))
    done = {d.engine for d in decisions if d.figures.get("version") == version}
    return decisions if done == set(NAMES) else []


def version_cell(page: Page, name: str) -> Any:
    return page.locator(f'#engine-table tr[data-engine^="{name}"] td.version')


def test_rewards_weight_updates_and_served_versions_on_the_run_page(
    operator_page: Page, stack: Stack, trained_run: Run, db_access: None
) -> None:
    page = operator_page
    run = trained_run
    token = Token.objects.get_or_create(user=get_user_model().objects.get(username=OPERATOR))[0]
    page.goto(f"{stack.web.url}/runs/{run.pk}/")
    expect(page.locator("#live-status")).to_have_text("live")
    page.wait_for_function("() => window.pacerMetrics.backfills >= 1")
    expect(version_cell(page, NAMES[0])).to_have_text("base")  # before any update
    page.evaluate(OBSERVE_VERSIONS)

    for step in range(1, ACKED + 1):
        wait_for(
            lambda s=step: StepRecord.objects.filter(run=run, step=s).exists(), 90, f"step {step}"
        )
        # The step reaches the reward chart live, before its acknowledgement.
        page.wait_for_function(
            "(step) => window.pacerPlots.reward.data[0].includes(step)", arg=step, timeout=30_000
        )
        ack(stack, token.key, run, step)
        wait_for(lambda s=step: updates_done(run, s), 60, f"both engines on version {step}")
    wait_for(
        lambda: StepRecord.objects.filter(run=run, step=ACKED + 1).exists(), 90, "the last step"
    )
    page.wait_for_function(
        "(n) => window.pacerPlots.reward.data[0].length === n", arg=ACKED + 1, timeout=30_000
    )

    # One point per written step, at the API's mean, std and policy version.
    answer = httpx.get(
        f"{stack.web.url}/api/runs/{run.pk}/steps/",
        headers={"Authorization": f"Token {token.key}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    records = answer.json()["results"]
    assert [r["step"] for r in records] == list(range(1, ACKED + 2))
    steps, means, highs, lows, versions = chart(page, "reward")
    assert steps == [r["step"] for r in records]
    assert means == [r["reward_mean"] for r in records]
    assert highs == pytest.approx([r["reward_mean"] + r["reward_std"] for r in records])
    assert lows == pytest.approx([r["reward_mean"] - r["reward_std"] for r in records])
    assert versions == [r["policy_version"] for r in records] == [0, 1, 2, 3]
    assert page.evaluate("() => window.pacerMetrics.backfills") == 1  # all of it came live

    # A span per weights decision on the time charts, a marker on the cap chart, a timeline
    # row each, and the reason on hover.
    decisions = updates_done(run, ACKED)
    assert len(decisions) == 2 * ACKED
    page.wait_for_function(
        "(n) => window.pacerWeightSpans.size === n", arg=len(decisions), timeout=30_000
    )
    spans = page.evaluate("() => Object.fromEntries(window.pacerWeightSpans)")
    assert {int(i) for i in spans} == {d.pk for d in decisions}
    for d in decisions:
        span = spans[str(d.pk)]
        assert span["engine"] == d.engine and span["reason"] == d.reason
        assert span["end"] - span["start"] == pytest.approx(d.figures["seconds"])
        assert span["end"] - span["start"] >= RELOAD_S
    expect(page.locator('#timeline tr[data-kind="weights"]')).to_have_count(len(decisions))
    weights = page.evaluate(
        "() => window.pacerPlots.cap.series.findIndex((s) => s.label === 'weights')"
    )
    assert [v for v in chart(page, "cap")[weights] if v is not None]  # its markers
    newest = max(decisions, key=lambda d: (d.at, d.pk))
    page.locator("#chart-queue").scroll_into_view_if_needed()
    box = page.evaluate(
        """(id) => {
            const u = window.pacerPlots.queue;
            const span = window.pacerWeightSpans.get(id);
            const over = u.over.getBoundingClientRect();
            return { x: over.left + u.valToPos((span.start + span.end) / 2, "x"),
                     y: over.top + over.height / 2 };
        }""",
        newest.pk,
    )
    page.mouse.move(box["x"], box["y"])
    tip = page.locator("#chart-queue .span-tip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text(f"serves version {ACKED} after")
    expect(tip).to_contain_text("(sync update)")

    # The Version column: "updating" during the pauses, the acknowledged version after.
    for name in NAMES:
        expect(version_cell(page, name)).to_have_text(f"v{ACKED}")
    seen = page.evaluate("() => window.versionTexts")
    assert "updating" in seen and seen.index("updating") < seen.index(f"v{ACKED}"), seen
    path = screenshot(page, "run-detail-reward-updates")
    print(f"\nscreenshot with rewards and weight updates: {path}")

    # A fresh load shows the same, the versions from the start.
    page.reload()
    for name in NAMES:
        expect(version_cell(page, name)).to_have_text(f"v{ACKED}")
    page.wait_for_function(
        "(n) => window.pacerPlots.reward.data[0].length === n", arg=ACKED + 1, timeout=30_000
    )
    assert chart(page, "reward")[1] == means
    assert page.evaluate("() => window.pacerWeightSpans.size") == len(decisions)
