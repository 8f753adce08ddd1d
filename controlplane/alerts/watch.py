"""The watch: every ``PACER_ALERTS_EVERY_S``, judge every enabled rule's conditions on the runs
it covers, open and resolve episodes, and send the deliveries that are due.

Any number of alerts workers may watch at once (no single process whose loss silences
alerts): an episode opens under a database constraint (one open per rule, run, kind and
key), resolves by a conditional update, and a due delivery is claimed by moving its
``next_attempt_at`` on in a conditional update, so whichever watcher wins does each once.
The watch never delivers itself: each attempt is a task on the alerts queue.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, close_old_connections, transaction
from django.utils import timezone

from controlplane.alerts.conditions import AlertKind, Condition, conditions
from controlplane.alerts.delivery import ATTEMPT_TIMEOUT_S, MAX_ATTEMPTS
from controlplane.alerts.facts import run_facts, runs_to_watch, window_s
from controlplane.alerts.models import (
    AlertEpisode,
    AlertRule,
    Delivery,
    DeliveryEvent,
    DeliveryState,
)
from controlplane.alerts.payloads import body
from controlplane.runs.queue import send_by_name

logger = logging.getLogger(__name__)

DELIVER_TASK = "workers.deliver_alert"  # workers.tasks.deliver_alert's registered name
# A claimed attempt not answered within this is sent again (its task was lost with a broker
# or a worker): the attempt's own limit and some slack for the queue.
CLAIM_S = ATTEMPT_TIMEOUT_S + 20.0


@dataclass
class LookReport:
    opened: int = 0
    resolved: int = 0
    sent: int = 0


Send = Callable[[int], bool]


def send_attempt(delivery_id: int) -> bool:
    return send_by_name(
        DELIVER_TASK,
        [delivery_id],
        what=f"alert delivery {delivery_id}",
        again="the alerts watch",
        queue=settings.PACER_ALERTS_QUEUE,
    )


def look(now: datetime | None = None, send: Send = send_attempt) -> LookReport:
    """One look at every rule; what it opened, resolved and sent."""
    now = now or timezone.now()
    report = LookReport()
    rules = list(AlertRule.objects.filter(enabled=True))
    if rules:
        _judge(rules, now, report)
    report.sent = _send_due(now, send)
    return report


def _judge(rules: list[AlertRule], now: datetime, report: LookReport) -> None:
    scoped = {rule.run_id for rule in rules}
    runs = runs_to_watch(now, None if None in scoped else {r for r in scoped if r is not None})
    window = window_s(rule.thresholds for rule in rules)
    facts = {run.pk: run_facts(run, now, window) for run in runs}
    open_now: dict[tuple[int, int, str, str], AlertEpisode] = {
        (e.rule_id, e.run_id, e.kind, e.key): e
        for e in AlertEpisode.objects.filter(resolved_at__isnull=True, rule__in=rules)
    }
    for rule in rules:
        wanted = set(rule.kinds)
        for run_id, run in facts.items():
            if rule.run_id not in (None, run_id):
                continue
            holding = {
                (c.kind.value, c.key): c
                for c in conditions(run, rule.thresholds, now)
                if c.kind.value in wanted
            }
            for (kind, key), condition in holding.items():
                if (rule.pk, run_id, kind, key) not in open_now:
                    report.opened += _open(rule, condition, now)
            for (rule_id, episode_run, kind, key), episode in open_now.items():
                if rule_id != rule.pk or episode_run != run_id or (kind, key) in holding:
                    continue
                if not AlertKind(kind).ends:
                    report.resolved += _resolve(rule, episode, now)


def _open(rule: AlertRule, condition: Condition, now: datetime) -> int:
    try:
        with transaction.atomic():
            episode = AlertEpisode.objects.create(
                rule=rule,
                run_id=condition.run_id,
                kind=condition.kind.value,
                key=condition.key,
                summary=condition.summary,
                engines=list(condition.engines),
                figures=condition.figures,
                opened_at=now,
            )
            _queue(rule, episode, DeliveryEvent.FIRED, now)
    except IntegrityError:  # another watcher opened it first
        return 0
    logger.info("alert rule %s: %s", rule.pk, condition.summary)
    return 1


def _resolve(rule: AlertRule, episode: AlertEpisode, now: datetime) -> int:
    with transaction.atomic():
        claimed = AlertEpisode.objects.filter(pk=episode.pk, resolved_at__isnull=True).update(
            resolved_at=now
        )
        if claimed:
            episode.resolved_at = now
            _queue(rule, episode, DeliveryEvent.RESOLVED, now)
    return claimed


def _queue(rule: AlertRule, episode: AlertEpisode, event: DeliveryEvent, now: datetime) -> None:
    Delivery.objects.create(
        episode=episode,
        event=event,
        url=rule.url,
        body=body(rule, episode, event, now),
        next_attempt_at=now,
    )


def _send_due(now: datetime, send: Send) -> int:
    """Send an attempt of every pending delivery due before the next look is half-way, each
    claimed first.

    Looks come a period apart, so an attempt goes at the look nearest its due time rather
    than the first after it: a backoff of 5 s and a look every 5 s give 5 s, not 10 s
    whenever the attempt ended a moment after the look began.
    """
    sent = 0
    soon = now + timedelta(seconds=settings.PACER_ALERTS_EVERY_S / 2)
    due = Delivery.objects.filter(
        state=DeliveryState.PENDING, next_attempt_at__lte=soon, attempts__lt=MAX_ATTEMPTS
    ).values_list("pk", "next_attempt_at")
    for pk, due_at in due[:500]:
        claimed = Delivery.objects.filter(pk=pk, next_attempt_at=due_at).update(
            next_attempt_at=now + timedelta(seconds=CLAIM_S)
        )
        if claimed and send(pk):
            sent += 1
    return sent


def watch_forever(stop: threading.Event) -> None:
    """An alerts worker's thread: a look every ``PACER_ALERTS_EVERY_S`` until ``stop``."""
    while not stop.wait(settings.PACER_ALERTS_EVERY_S):
        try:
            close_old_connections()
            look()
        except Exception:  # a look that failed (the database away) is tried at the next
            logger.exception("alerts: a look at the rules failed")
