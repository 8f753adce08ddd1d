"""One attempt at delivering a notification, as a Celery task runs it, and the backoff
between attempts.

Each attempt is a task of its own, sent by the watch when the delivery is due: the schedule
lives in the database (``next_attempt_at``), not in a worker's memory, so a worker that dies
between attempts loses none, and a webhook that hangs holds one alerts-worker thread for
``ATTEMPT_TIMEOUT_S`` at most, never a run.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import httpx
from django.db import transaction
from django.utils import timezone

from controlplane.alerts.models import Delivery, DeliveryState

logger = logging.getLogger(__name__)

# A webhook receiver answers in well under a second; one that has not within these is down
# or hung, and the next attempt comes after the backoff.
CONNECT_TIMEOUT_S = 3.0
ATTEMPT_TIMEOUT_S = 10.0
# 5 s doubled at each failure up to 10 min; eight attempts span about 20 min, long enough
# to ride out a receiver's restart or deploy and short enough to report a dead one.
FIRST_BACKOFF_S = 5.0
MAX_BACKOFF_S = 600.0
MAX_ATTEMPTS = 8
ANSWER_CHARS = 500  # of the status line or the error kept with the delivery


def backoff_s(attempts: int) -> float:
    """Wait before the attempt after ``attempts`` failed ones."""
    return min(FIRST_BACKOFF_S * 2 ** (attempts - 1), MAX_BACKOFF_S)


def deliver(delivery_id: int) -> str:
    """POST the delivery's body once and record the answer; a state in words, for the log."""
    delivery = Delivery.objects.filter(pk=delivery_id).first()
    if delivery is None or delivery.state != DeliveryState.PENDING:
        return f"delivery {delivery_id}: nothing to do"
    status: int | None = None
    try:
        answer = httpx.post(
            delivery.url,
            json=delivery.body,
            timeout=httpx.Timeout(ATTEMPT_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            follow_redirects=False,
        )
        # The status line, never the body: a rule's URL may point inside the network, and
        # what a page there says must not reach whoever reads deliveries.
        status, text = answer.status_code, f"{answer.status_code} {answer.reason_phrase}"
    except httpx.HTTPError as failed:
        text = f"{type(failed).__name__}: {failed}"[:ANSWER_CHARS]
    now = timezone.now()
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().get(pk=delivery_id)
        if delivery.state != DeliveryState.PENDING:  # another attempt answered meanwhile
            return f"delivery {delivery_id}: {delivery.state} already"
        delivery.attempts += 1
        delivery.last_attempt_at = now
        delivery.status_code = status
        delivery.answer = text
        if status is not None and 200 <= status < 300:
            delivery.state, delivery.delivered_at = DeliveryState.DELIVERED, now
        elif delivery.attempts >= MAX_ATTEMPTS:
            delivery.state = DeliveryState.FAILED
        else:
            delivery.next_attempt_at = now + timedelta(seconds=backoff_s(delivery.attempts))
        delivery.save()
    if delivery.state != DeliveryState.DELIVERED:
        logger.warning(
            "alert delivery %s to %s: attempt %d %s (%s)",
            delivery_id,
            delivery.url,
            delivery.attempts,
            "failed for good" if delivery.state == DeliveryState.FAILED else "failed",
            text if status is None else f"HTTP {status}",
        )
    return f"delivery {delivery_id}: {delivery.state} after {delivery.attempts} attempts"
