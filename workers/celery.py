"""The Celery app that hosts run runtimes; its settings come from Django's (``CELERY_*``).

A worker that consumes the run queue also sweeps for runs that need a task (a dead worker's,
or one whose task a broker restart lost), and on shutdown tells the runs it hosts to hand
themselves back. A worker that consumes the alerts queue (``PACER_ALERTS_QUEUE``) watches the
alert rules and delivers their notifications; one worker may do both, but a deployment keeps
them apart so that a webhook that hangs never waits in a run worker's pool.
"""

import logging
import os
import threading
from typing import Any

from celery import Celery
from celery.signals import worker_ready, worker_shutting_down

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("pacer")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])

logger = logging.getLogger(__name__)


_STOP_WATCHING = threading.Event()


@worker_ready.connect
def _start_background(sender: Any, **_: object) -> None:
    """``sender`` is the worker's consumer: its node name, how many tasks it runs at once and
    the queues it consumes (``-Q``)."""
    from django.conf import settings

    queues = set(sender.app.amqp.queues.consume_from)
    if settings.CELERY_TASK_DEFAULT_QUEUE in queues:
        from workers.runtime.sweep import sweep_forever

        threading.Thread(
            target=sweep_forever,
            args=(sender.hostname, sender.controller.concurrency),
            name="pacer-sweep",
            daemon=True,
        ).start()
    if settings.PACER_ALERTS_QUEUE in queues:
        from controlplane.alerts.watch import watch_forever

        threading.Thread(
            target=watch_forever, args=(_STOP_WATCHING,), name="pacer-alerts", daemon=True
        ).start()


@worker_shutting_down.connect
def _hand_runs_back(**_: object) -> None:
    from workers.runtime.host import SHUTDOWN

    logger.info("worker shutting down: its runs are handed back")
    SHUTDOWN.set()
    _STOP_WATCHING.set()
