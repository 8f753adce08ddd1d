"""The project's top-level layout, as it was asked for: manage.py, controlplane/, workers/,
inference/, templates/, tests/, docker-compose.yml; the site-wide templates in templates/,
each app's own in the app."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO_ROOT, free_port

SITE_TEMPLATES = ("base.html", "signin.html", "400.html", "403.html", "404.html", "500.html")


def test_the_top_level_holds_the_asked_for_layout() -> None:
    for name in ("controlplane", "workers", "inference", "templates", "tests"):
        assert (REPO_ROOT / name).is_dir(), name
    for name in ("manage.py", "docker-compose.yml"):
        assert (REPO_ROOT / name).is_file(), name


def test_the_site_wide_templates_live_in_templates_and_no_app_keeps_a_copy() -> None:
    for name in SITE_TEMPLATES:
        assert (REPO_ROOT / "templates" / name).is_file(), name
    in_apps = {path.name for path in (REPO_ROOT / "controlplane").rglob("templates/**/*.html")}
    assert in_apps.isdisjoint(SITE_TEMPLATES), in_apps & set(SITE_TEMPLATES)


def test_the_image_copies_the_templates() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert "COPY templates ./templates" in dockerfile


# The web side: what a web process loads (the ASGI app, the URLconf and every module under
# controlplane/ but the terminal's commands, which run configs in the foreground on purpose),
# and what it imports to send a run's task (to a Redis that is away: nothing is sent).
WEB_SIDE_PROBE = """
import contextlib, importlib, pkgutil, sys
import django
django.setup()
import controlplane, controlplane.asgi, controlplane.urls
for found in pkgutil.walk_packages(controlplane.__path__, "controlplane."):
    if ".management.commands." not in found.name and ".migrations." not in found.name:
        importlib.import_module(found.name)
from controlplane.runs.services import enqueue
with contextlib.suppress(Exception):
    enqueue(0)
print(" ".join(sorted(name for name in sys.modules if name.startswith("workers."))))
"""
# Worker code the web side must not import: the tasks, and the runtime that hosts runs (which
# imports the services: the circle services -> tasks -> host -> services). run_folders and
# checkpoints are the path rules web and workers share (a run's folder, a trainer's
# checkpoint), and engines the checks an engine passes before a run uses it (an engine added
# to a run is asked by the web process): plain functions that import nothing of the rest.
WORKER_ONLY = ("workers.tasks", "workers.runtime.")
SHARED_RUNTIME = {
    "workers.runtime.run_folders",
    "workers.runtime.checkpoints",
    "workers.runtime.engines",
}


def test_the_web_side_imports_no_worker_code() -> None:
    """Sending a run's task by name (controlplane.runs.queue) lets the web side stand without
    the worker's tasks and runtime."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
    }
    answer = subprocess.run(
        [sys.executable, "-c", WEB_SIDE_PROBE],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    imported = set(answer.stdout.split())
    worker_code = {
        name for name in imported if name.startswith(WORKER_ONLY) and name not in SHARED_RUNTIME
    }
    assert not worker_code, sorted(worker_code)
