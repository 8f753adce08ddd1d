"""Alerts that reach people, through real processes: a run worker hosting a run on simulated
engines, an alerts worker watching the rules and delivering, and webhook receivers that
answer, fail or hang. Rules are made through the API."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.alerts.models import AlertEpisode, Delivery
from controlplane.runs.models import Run, RunState
from controlplane.runs.services import enqueue
from tests.conftest import REPO_ROOT, VENV_BIN, free_port, stop_process_group
from tests.integration.hosting import (
    DbWorker,
    end_run,
    operator_api,
    run_document,
    sim_engines,
    start_sim,
    start_worker,
    stop_workers,
    wait_for,
    wait_healthy,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# A look every 5 s (PACER_ALERTS_EVERY_S) after the poll that shows the condition.
TOLD_WITHIN_S = 30.0


@dataclass
class Receiver:
    url: str
    log: Path
    mode_file: Path

    def mode(self, mode: str) -> None:
        self.mode_file.write_text(mode)

    def posts(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@contextlib.contextmanager
def receiver(folder: Path, name: str, mode: str = "ok") -> Iterator[Receiver]:
    port = free_port()
    found = Receiver(
        f"http://127.0.0.1:{port}/hooks/{name}", folder / f"{name}.jsonl", folder / f"{name}.mode"
    )
    found.mode(mode)
    process = subprocess.Popen(
        [
            *(str(VENV_BIN / "python"), "-m", "tests.integration.webhook_receiver"),
            *("--port", str(port), "--log", str(found.log), "--mode", str(found.mode_file)),
        ],
        cwd=REPO_ROOT,
        start_new_session=True,
    )
    try:
        wait_for(lambda: _listening(port), 20, "the webhook receiver")
        yield found
    finally:
        stop_process_group(process)


def _listening(port: int) -> bool:
    import socket

    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


@pytest.fixture
def operator() -> APIClient:
    return operator_api("oncall")


@pytest.fixture
def alerts_worker(tmp_path: Path, queue: str, runs_dir: Path) -> Iterator[DbWorker]:
    """An alerts worker: the watch and the deliveries, consuming its own alerts queue only
    (so it sweeps no runs: the run queue is not among its queues)."""
    alerts_queue = f"{queue}-alerts"
    worker = start_worker(
        tmp_path,
        "alerts",
        alerts_queue,
        runs_dir,
        concurrency=4,
        PACER_CELERY_QUEUE=queue,
        PACER_ALERTS_QUEUE=alerts_queue,
    )
    try:
        yield worker
    finally:
        stop_workers(worker)


def make_rule(api: APIClient, url: str, **fields: Any) -> dict[str, Any]:
    answer = api.post("/api/alerts/rules/", {"name": "on-call", "url": url, **fields})
    assert answer.status_code == 201, answer.content
    return answer.json()


def hosted_run(engines: list, name: str, **top: Any) -> Run:
    run = Run.objects.create(name=name, config=run_document(engines, **top), state=RunState.QUEUED)
    enqueue(run.pk)
    return run


@pytest.mark.sqlite  # the quick start's database: the episode constraint holds there too
def test_an_engine_down_is_told_once_and_resolved_once_in_json_and_in_slack(
    tmp_path: Path, queue: str, runs_dir: Path, operator: APIClient, alerts_worker: DbWorker
) -> None:
    with receiver(tmp_path, "slack") as slack, receiver(tmp_path, "json") as hook:
        rule = make_rule(operator, hook.url, engine_down_s=2.0)
        make_rule(
            operator, slack.url, body_format="slack", kinds=["engine_down"], engine_down_s=2.0
        )
        with sim_engines(tmp_path, 2) as engines:
            worker = start_worker(tmp_path, "w", queue, runs_dir)
            try:
                run = hosted_run(engines, "alerted", max_steps=1000)
                wait_for(lambda: Run.objects.get(pk=run.pk).step >= 1, 60, "a step")
                victim = engines[1]
                port = int(victim.url.rsplit(":", 1)[1])
                os.killpg(victim.process.pid, signal.SIGKILL)
                victim.process.wait()
                killed_at = time.time()
                fired = wait_for(lambda: hook.posts(), TOLD_WITHIN_S, "the engine-down alert")
                told_after = fired[0]["at"] - killed_at
                time.sleep(6)  # looks go on while the engine stays down: no second alert
                engines[1] = start_sim(tmp_path / "sim-1-again.log", port, 9)
                wait_healthy(engines[1])
                wait_for(lambda: len(hook.posts()) >= 2, 60, "the resolved notification")
                end_run(run)
            finally:
                stop_workers(worker)
        wait_for(lambda: len(slack.posts()) >= 2, TOLD_WITHIN_S, "slack's two notifications")
    first, resolved = (post["body"] for post in hook.posts()[:2])
    assert first["event"] == "fired" and first["kind"] == "engine_down", first
    assert first["run"]["id"] == run.pk and first["run"]["url"].endswith(f"/runs/{run.pk}/")
    assert len(first["engines"]) == 1 and first["engines"][0] in first["summary"]
    assert " has been down for " in first["summary"] and first["figures"]["seconds"] >= 2
    assert first["rule"] == {"id": rule["id"], "name": "on-call"}
    assert resolved["event"] == "resolved" and resolved["episode"] == first["episode"]
    assert len(hook.posts()) == 2, [p["body"]["summary"] for p in hook.posts()]
    texts = [post["body"]["text"] for post in slack.posts()]
    assert texts[0].startswith("[FIRING] ") and texts[1].startswith("[RESOLVED] ")
    assert f"|run {run.pk}>" in texts[0]
    episode = AlertEpisode.objects.get(pk=first["episode"])
    assert episode.resolved_at is not None
    assert {d.state for d in Delivery.objects.all()} == {"delivered"}
    assert {d.answer for d in Delivery.objects.all()} == {"204 No Content"}
    listed = operator.get("/api/alerts/deliveries/", {"rule": rule["id"]}).json()
    assert [d["event"] for d in listed] == ["resolved", "fired"]
    assert all(d["attempts"] == 1 and d["status_code"] == 204 for d in listed)
    print(f"engine down -> webhook: {told_after:.1f} s (threshold 2 s)")


def test_a_failing_webhook_is_retried_with_backoff_until_it_answers(
    tmp_path: Path, queue: str, runs_dir: Path, operator: APIClient, alerts_worker: DbWorker
) -> None:
    with receiver(tmp_path, "flaky", mode="fail") as hook:
        make_rule(operator, hook.url, kinds=["run_completed"])
        with sim_engines(tmp_path, 2) as engines:
            worker = start_worker(tmp_path, "w", queue, runs_dir)
            try:
                run = hosted_run(engines, "short", max_steps=2)
                wait_for(lambda: Run.objects.get(pk=run.pk).is_ended, 90, "the run to end")
            finally:
                stop_workers(worker)
        wait_for(lambda: len(hook.posts()) >= 2, 60, "a second attempt after the first 500")
        delivery = Delivery.objects.get()
        assert delivery.state == "pending" and delivery.status_code == 500
        assert delivery.answer == "500 Internal Server Error"
        hook.mode("ok")
        wait_for(lambda: Delivery.objects.get().state == "delivered", 90, "the delivery to succeed")
    delivery = Delivery.objects.get()
    posts = hook.posts()
    assert delivery.attempts == len(posts) >= 3
    assert all(post["body"] == posts[0]["body"] for post in posts)  # the same notification
    assert (
        posts[0]["body"]["kind"] == "run_completed"
        and "completed 2 steps" in (posts[0]["body"]["summary"])
    )
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(posts)]
    assert gaps[1] > gaps[0] * 1.5, gaps  # backing off: 5 s, then 10 s (at the nearest look)


def test_a_hanging_webhook_holds_neither_the_run_nor_another_rule_s_delivery(
    tmp_path: Path, queue: str, runs_dir: Path, operator: APIClient, alerts_worker: DbWorker
) -> None:
    with receiver(tmp_path, "hung", mode="hang") as hung, receiver(tmp_path, "fine") as fine:
        make_rule(operator, hung.url, kinds=["run_completed", "run_failed"])
        make_rule(operator, fine.url, kinds=["run_completed", "run_failed"])
        with sim_engines(tmp_path, 2) as engines:
            worker = start_worker(tmp_path, "w", queue, runs_dir)
            try:
                first = hosted_run(engines, "first", max_steps=2)
                wait_for(lambda: Run.objects.get(pk=first.pk).is_ended, 90, "the first run")
                wait_for(lambda: len(fine.posts()) >= 1, TOLD_WITHIN_S, "the working hook")
                wait_for(lambda: len(hung.posts()) >= 1, TOLD_WITHIN_S, "the hung hook's call")
                # While the hung receiver holds its call, a second run starts and ends as fast
                # as the first did, and its end reaches the working receiver as fast.
                started = time.time()
                second = hosted_run(engines, "second", max_steps=2)
                wait_for(lambda: Run.objects.get(pk=second.pk).is_ended, 90, "the second run")
                wait_for(lambda: len(fine.posts()) >= 2, TOLD_WITHIN_S, "the second end told")
                second_told_s = fine.posts()[1]["at"] - started
            finally:
                stop_workers(worker)
        hung_delivery = Delivery.objects.filter(url=hung.url).order_by("created_at").first()
        assert hung_delivery is not None
        wait_for(
            lambda: Delivery.objects.get(pk=hung_delivery.pk).attempts >= 1,
            30,
            "the hung attempt to time out",
        )
    hung_delivery.refresh_from_db()
    assert hung_delivery.state == "pending" and hung_delivery.status_code is None
    assert hung_delivery.answer.startswith("ReadTimeout"), hung_delivery.answer
    assert {p["body"]["run"]["id"] for p in fine.posts()} == {first.pk, second.pk}
    assert Run.objects.get(pk=second.pk).state == RunState.COMPLETED
    print(f"second run started -> its end told, beside a hung webhook: {second_told_s:.1f} s")
