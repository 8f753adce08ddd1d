"""The pool claims in the database: each hosted run's, written under its lease, and the
fresh claims of every run that may share its engines, read back in the same call. Only
hosted runs' claims count: a run that ended, paused or was handed back drops out of its pool
at once, its row left for its next host to rewrite."""

from __future__ import annotations

from django.utils import timezone

from controlplane.runs.models import PoolClaim
from workers.core.sharing import Claim
from workers.runtime.store import fenced


@fenced
def exchange(run_id: int, owner: str, claim: Claim, capacity: int | None) -> list[Claim]:
    """Write ``claim`` (with the capacity its ceiling was cut from), and read every fresh
    claim of a hosted run, this one's included."""
    now = timezone.now()
    PoolClaim.objects.update_or_create(
        run_id=run_id,
        defaults={
            "engines": sorted(claim.engines),
            "weight": claim.weight,
            "priority": claim.priority,
            "demand": claim.demand,
            "inflight": claim.inflight,
            "loaded": claim.loaded,
            "overloaded": claim.overloaded,
            "queued": claim.queued,
            "ceiling": claim.ceiling,
            "capacity": capacity,
            "updated_at": now,
        },
    )
    return [row.as_claim() for row in PoolClaim.objects.counted(now)]
