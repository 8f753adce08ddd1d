"""The sweep each worker runs: runs whose lease expired (their worker died) or whose task
was lost are sent a task again, so another worker takes them within a lease and a sweep."""

from __future__ import annotations

import logging

from django.db import close_old_connections

from controlplane.runs.services import enqueue
from workers.runtime import lease

logger = logging.getLogger(__name__)


def sweep_once() -> list[int]:
    """Queue every orphaned run once; the ids queued."""
    found = lease.orphaned()
    for run_id in found:
        logger.info("sweep: run %s has no live host; queued again", run_id)
        enqueue(run_id)
    return found


def sweep_forever() -> None:
    """Every ``SWEEP_S`` until the process ends; a failed sweep (the database away) is
    logged and tried again."""
    from workers.runtime.host import SHUTDOWN

    while not SHUTDOWN.wait(lease.SWEEP_S):
        try:
            sweep_once()
        except Exception:
            logger.warning("sweep failed; trying again in %g s", lease.SWEEP_S, exc_info=True)
        finally:
            close_old_connections()
