"""One host per run: a lease in the run's row, taken and renewed by single conditional
UPDATEs, so two workers racing for a run cannot both win, and released with the run's new
state by ``store.end_run``.

A worker drives a run only while it holds an unexpired lease, and renews it every
``LEASE_RENEW_S``. Celery's own redelivery cannot do this job: with the Redis broker an
unacknowledged task comes back only after the visibility timeout (a week, so that a long run
is never delivered twice), and a redelivered task may meet a host that is still alive. So the
lease decides: a task that finds a live lease held by another exits at once, and the sweep
(every worker runs one) queues again any run whose lease expired, or whose task was lost.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from controlplane.runs.models import Run, RunState

# A dead worker's run waits at most this long (plus a sweep) before another takes it.
LEASE_TTL_S = 20.0
# A live host renews seven times within its tenure (the TTL less workers.runtime.tenure's
# margin, 15 s), so a database away for 10 s, or a few slow renewals, cost no lease.
LEASE_RENEW_S = 2.0
SWEEP_S = 5.0  # how often each worker looks for runs to queue again
# A queued run whose task nobody took for this long lost it (a broker restart) and is sent
# again; a duplicate is harmless, since the lease admits one host.
REQUEUE_AFTER_S = 30.0
HOSTABLE = (RunState.QUEUED, RunState.RUNNING, RunState.STOPPING)


def take(run_id: int, owner: str) -> bool:
    """Take the run's lease if it is free, expired, or already ours; the run is RUNNING then
    (or stays STOPPING)."""
    now = timezone.now()
    free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now) | Q(lease_owner=owner)
    taken = Run.objects.filter(free, pk=run_id, state__in=HOSTABLE).update(
        lease_owner=owner, lease_expires_at=now + timedelta(seconds=LEASE_TTL_S)
    )
    if taken:
        Run.objects.filter(pk=run_id, state=RunState.QUEUED).update(
            state=RunState.RUNNING, started_at=now
        )
    return taken == 1


def renew(run_id: int, owner: str) -> bool:
    """Extend our lease; False when another host holds it now (we lost it while stalled)."""
    now = timezone.now()
    return (
        Run.objects.filter(pk=run_id, lease_owner=owner).update(
            lease_expires_at=now + timedelta(seconds=LEASE_TTL_S)
        )
        == 1
    )


def orphaned(limit: int) -> list[int]:
    """Runs that need a task: hosted once and their lease expired, or without a lease and
    sent ``REQUEUE_AFTER_S`` ago without being taken; at most ``limit``. Each is claimed by
    one UPDATE (lease cleared, ``enqueued_at`` now), so of several sweeps at once one sends
    its task."""
    now = timezone.now()
    expired = Q(state__in=HOSTABLE, lease_expires_at__lt=now)
    lost = Q(
        state__in=HOSTABLE,
        lease_expires_at__isnull=True,
        enqueued_at__lt=now - timedelta(seconds=REQUEUE_AFTER_S),
    )
    found: list[int] = []
    for run_id in Run.objects.filter(expired | lost).order_by("pk").values_list("pk", flat=True):
        if len(found) >= limit:
            break
        claimed = Run.objects.filter(expired | lost, pk=run_id).update(
            enqueued_at=now, lease_owner="", lease_expires_at=None
        )
        if claimed:
            found.append(run_id)
    return found
