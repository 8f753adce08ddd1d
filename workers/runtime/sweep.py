"""The sweep each worker runs: runs whose lease expired (their worker died) or whose task
was lost are sent a task again, so another worker takes them within a lease and a sweep.

A sweep sends what it claims to its own worker's queue (Celery's worker-direct queue), never
to the shared one, and claims no more runs than its worker has room for. A sweep that could
claim a run reached the database, so its worker is a healthy host; on the shared queue the
task could go back to the worker that lost the run, which may be alive and consuming while
its database connection hangs, and which would lose it again.
Every PACER_ROLLUP_EVERY_S it also compacts engine samples into rollups (runs.rollups), for
at most PACER_ROLLUP_SWEEP_BUDGET_S, so a backlog never holds up the next look for orphans."""

from __future__ import annotations

import logging
import time

from celery.utils.nodenames import worker_direct
from django.conf import settings
from django.db import close_old_connections, connection

from controlplane.runs import rollups
from workers.runtime import lease

logger = logging.getLogger(__name__)


def sweep_once(hostname: str, room: int) -> list[int]:
    """Claim at most ``room`` orphaned runs and send each to worker ``hostname``'s own
    queue; the ids sent."""
    from workers.tasks import run_execute

    found = lease.orphaned(limit=room) if room > 0 else []
    for run_id in found:
        logger.info("sweep: run %s has no live host; this worker takes it", run_id)
        run_execute.apply_async((run_id,), queue=worker_direct(hostname))
    return found


def compact_once() -> list[rollups.Compacted]:
    """Compact every run's samples within the sweep's budget (PostgreSQL only: the quick
    start's SQLite reads raw samples, which it keeps)."""
    if connection.vendor != "postgresql":
        return []
    deadline = time.monotonic() + settings.PACER_ROLLUP_SWEEP_BUDGET_S
    return rollups.compact_all(deadline=deadline, on_run=_log_compaction)


def _log_compaction(report: rollups.Compacted) -> None:
    if report.deleted or any(report.rows.values()):
        logger.info(
            "compaction: run %s, rollup rows %s, raw samples deleted %d%s",
            report.run_id,
            report.rows,
            report.deleted,
            "" if report.caught_up else " (more next sweep)",
        )


def sweep_forever(hostname: str, slots: int) -> None:
    """Every ``SWEEP_S`` until the process ends, for worker ``hostname`` which hosts up to
    ``slots`` runs at once, compacting every PACER_ROLLUP_EVERY_S; a failed sweep or
    compaction (the database away) is logged and tried again."""
    from workers.runtime.host import SHUTDOWN, hosted_here

    compacted_at = time.monotonic()
    while not SHUTDOWN.wait(lease.SWEEP_S):
        try:
            sweep_once(hostname, room=slots - hosted_here())
            if time.monotonic() - compacted_at >= settings.PACER_ROLLUP_EVERY_S:
                compacted_at = time.monotonic()
                compact_once()
        except Exception:
            logger.warning("sweep failed; trying again in %g s", lease.SWEEP_S, exc_info=True)
        finally:
            close_old_connections()
