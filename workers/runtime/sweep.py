"""The sweep each worker runs: runs whose lease expired (their worker died) or whose task
was lost are sent a task again, so another worker takes them within a lease and a sweep.
Every PACER_ROLLUP_EVERY_S it also compacts engine samples into rollups (runs.rollups), for
at most PACER_ROLLUP_SWEEP_BUDGET_S, so a backlog never holds up the next look for orphans."""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db import close_old_connections, connection

from controlplane.runs import rollups
from controlplane.runs.queue import enqueue
from workers.runtime import lease

logger = logging.getLogger(__name__)


def sweep_once() -> list[int]:
    """Queue every orphaned run once; the ids queued."""
    found = lease.orphaned()
    for run_id in found:
        logger.info("sweep: run %s has no live host; queued again", run_id)
        enqueue(run_id)
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


def sweep_forever() -> None:
    """Every ``SWEEP_S`` until the process ends, compacting every PACER_ROLLUP_EVERY_S; a
    failed sweep or compaction (the database away) is logged and tried again."""
    from workers.runtime.host import SHUTDOWN

    compacted_at = time.monotonic()
    while not SHUTDOWN.wait(lease.SWEEP_S):
        try:
            sweep_once()
            if time.monotonic() - compacted_at >= settings.PACER_ROLLUP_EVERY_S:
                compacted_at = time.monotonic()
                compact_once()
        except Exception:
            logger.warning("sweep failed; trying again in %g s", lease.SWEEP_S, exc_info=True)
        finally:
            close_old_connections()
