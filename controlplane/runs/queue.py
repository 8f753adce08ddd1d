"""Sending a run's task, from the web side and the sweep alike.

By name (``send_task``), so that the control plane never imports the worker's code: the task
(``workers.tasks``) imports the host, which imports the services, which would import the task
again. The Celery app is only the broker's configuration (``workers.celery``), which imports
no task and no runtime.
"""

from __future__ import annotations

from workers.celery import app

RUN_TASK = "workers.run_execute"  # the name workers.tasks.run_execute is registered under


def enqueue(run_id: int) -> None:
    """Send the run's task; a run already hosted makes the task exit at once."""
    app.send_task(RUN_TASK, args=[run_id])
