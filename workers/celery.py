"""The Celery app that hosts run runtimes; its settings come from Django's (``CELERY_*``).

Each worker also sweeps for runs that need a task (a dead worker's, or one whose task a broker
restart lost), and on shutdown tells the runs it hosts to hand themselves back.
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


@worker_ready.connect
def _start_sweep(sender: Any, **_: object) -> None:
    """``sender`` is the worker's consumer: its node name and how many tasks it runs at once."""
    from workers.runtime.sweep import sweep_forever

    threading.Thread(
        target=sweep_forever,
        args=(sender.hostname, sender.controller.concurrency),
        name="pacer-sweep",
        daemon=True,
    ).start()


@worker_shutting_down.connect
def _hand_runs_back(**_: object) -> None:
    from workers.runtime.host import SHUTDOWN

    logger.info("worker shutting down: its runs are handed back")
    SHUTDOWN.set()
