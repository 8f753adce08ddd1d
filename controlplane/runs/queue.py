"""Sending a run's task, from the web side and the sweep alike.

By name (``send_task``), so that the control plane never imports the worker's code: the task
(``workers.tasks``) imports the host, which imports the services, which would import the task
again. The Celery app is only the broker's configuration (``workers.celery``), which imports
no task and no runtime.

A send never blocks a request and never fails one. The run is stored before its task is sent
(``enqueued_at`` says when), and a queued run whose task nobody took within
``workers.runtime.lease.REQUEUE_AFTER_S`` is sent again by the sweep every worker runs; so a
send that fails, the broker (Redis) being away, loses nothing, and is logged. Hence one
attempt, bounded in time: no retried publish (``retry=False``), a connection of its own that
tries to connect once (kombu's default retries for ``broker_connection_timeout``, 4 s, which
held a create 6 s) with socket timeouts (a hung Redis would hold it for ever), and no result
(``ignore_result``: the Redis result backend subscribes to the task's result channel before
the send, and retries that for 20 s when Redis is away, which held each create that long and
then answered 500 with the run stored).
"""

from __future__ import annotations

import logging

from workers.celery import app

logger = logging.getLogger(__name__)

RUN_TASK = "workers.run_execute"  # the name workers.tasks.run_execute is registered under

# Redis answers a send in about a millisecond; one that does not within this is away (as the
# control messages' PUBLISH_TIMEOUT_S).
SEND_TIMEOUT_S = 1.0
SEND_TRANSPORT_OPTIONS = {
    "max_retries": 0,  # connect once: kombu counts retries after the first attempt
    "socket_connect_timeout": SEND_TIMEOUT_S,
    "socket_timeout": SEND_TIMEOUT_S,
}


def enqueue(run_id: int) -> bool:
    """Send the run's task once (a run already hosted makes the task exit at once); False,
    logged, when the broker could not take it: the sweep sends it again later."""
    return send_by_name(RUN_TASK, [run_id], what=f"run {run_id}", again="the sweep")


def send_by_name(task: str, args: list[object], *, what: str, again: str, **options: str) -> bool:
    """Send ``task`` once, bounded in time, with no result; False, logged, when the broker
    could not take it (``again`` says who sends it later). ``options``: ``queue=...``."""
    try:
        with app.connection_for_write(transport_options=SEND_TRANSPORT_OPTIONS) as connection:
            app.send_task(
                task, args=args, connection=connection, retry=False, ignore_result=True, **options
            )
    except Exception as failed:  # kombu's OperationalError, redis-py's and socket errors alike
        logger.warning(
            "%s: its task could not be sent (%s: %s); %s sends it again",
            what,
            type(failed).__name__,
            failed,
            again,
        )
        return False
    return True
