"""The pool claims in the database: each hosted run's, written under its lease, and the
fresh claims of every run that may share its engines, read back in the same call. Only
hosted runs' claims count: a run that ended, paused or was handed back drops out of its pool
at once, its row left for its next host to rewrite. A claim's ``since`` is when its current
host first wrote it: the pool is sized by the run hosted on it longest. Both times are the
database's clock, which every host reads alike."""

from __future__ import annotations

from django.db.models.functions import Now

from controlplane.runs.models import PoolClaim
from workers.core.sharing import Claim
from workers.runtime.store import fenced


@fenced
def exchange(run_id: int, owner: str, claim: Claim) -> list[Claim]:
    """Write ``claim`` (``owner`` being its host), and read every fresh claim of a hosted
    run, this one's included. Times are the database's (``PoolClaim.objects.counted``)."""
    fields = {
        "engines": sorted(claim.engines),
        "weight": claim.weight,
        "priority": claim.priority,
        "demand": claim.demand,
        "inflight": claim.inflight,
        "max_inflight": claim.max_inflight,
        "level": claim.level,
        "renew_s": claim.renew_s,
        "ceiling": claim.ceiling,
        "footprint": claim.footprint,
        "completed": claim.completed,
        "updated_at": Now(),
    }
    kept = PoolClaim.objects.filter(run_id=run_id, owner=owner).update(**fields)
    if not kept:
        PoolClaim.objects.update_or_create(
            run_id=run_id, defaults={**fields, "owner": owner, "since": Now()}
        )
    return [row.as_claim() for row in PoolClaim.objects.counted()]
