"""The whole stack for the browser tests, started once per session: a real web server
(daphne, DEBUG off, static files by whitenoise) on the test database, a real Celery worker on
a queue of its own, two simulator engines registered as ``sim-engine-0/1``, and Debian's
Chromium driven by Playwright. Test code reads and writes the same database directly."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import setup_databases, teardown_databases
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from controlplane.runs.models import Run, RunState
from controlplane.runs.roles import grant
from controlplane.runs.services import engine_register, override_create
from tests.conftest import REPO_ROOT, VENV_BIN, free_port, stop_process_group
from tests.integration.hosting import (
    STARTUP_S,
    DbWorker,
    SimEngine,
    session_database_url,
    sim_engines,
    start_worker,
    stop_worker,
    wait_for,
)
from workers.celery import app

CHROMIUM = Path(os.environ.get("PACER_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO_ROOT / "var" / "artifacts"
PASSWORD = "correct horse battery"
OPERATOR, VIEWER = "olga", "victor"


@dataclass
class WebServer:
    """daphne serving Pacer; ``restart`` kills it and starts it again on the same port."""

    port: int
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.starts += 1
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    str(VENV_BIN / "daphne"),
                    *("-b", "127.0.0.1", "-p", str(self.port)),
                    "controlplane.asgi:application",
                ],
                cwd=REPO_ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self._healthy, STARTUP_S, "the web server")

    def _healthy(self) -> bool:
        assert self.process is not None and self.process.poll() is None, self.log()[-3000:]
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.url}/api/health/", timeout=2).status_code == 200
        return False

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process)
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class Stack:
    web: WebServer
    worker: DbWorker
    engines: list[SimEngine]
    queue: str
    runs_dir: Path
    started_runs: list[int] = field(default_factory=list)


@pytest.fixture(scope="session")
def browser_database(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """The test database, set up here when pytest-django did not: it sets one up only for
    tests marked ``django_db``, and these are not, since a marked test runs in a transaction
    or ends in a flush, while the stack's processes share this database for the session."""
    if connection.settings_dict["NAME"] == connection.creation._get_test_db_name():
        yield
        return
    with django_db_blocker.unblock():
        databases = setup_databases(verbosity=0, interactive=False, aliases={"default"})
    try:
        yield
    finally:
        with django_db_blocker.unblock():
            connection.close()  # a session of this process's own would block the drop
            teardown_databases(databases, verbosity=0)


@pytest.fixture(scope="session")
def stack(
    browser_database: None,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("browser-stack")
    queue = f"pacer-browser-{uuid.uuid4().hex[:8]}"
    runs_dir = folder / "runs"
    before = app.conf.task_default_queue
    app.conf.task_default_queue = queue  # runs created by test code go to this stack's worker
    # Live events apart from any other stack on the same Redis (run ids repeat across test
    # databases); the web server and the worker inherit it.
    prefix_before = os.environ.get("PACER_CHANNELS_PREFIX")
    os.environ["PACER_CHANNELS_PREFIX"] = f"pacer-{queue}"
    with sim_engines(folder, 2) as engines:
        with django_db_blocker.unblock():
            env = _stack_env(folder, queue, runs_dir)
            _seed(engines)
            _collect_static(env)
        web = WebServer(free_port(), env, folder / "web.log")
        worker = start_worker(folder, "browser", queue, runs_dir)
        try:
            web.start()
            yield Stack(web, worker, engines, queue, runs_dir)
        finally:
            with django_db_blocker.unblock():
                for run in Run.objects.exclude(state__in=RunState.ended()):
                    with contextlib.suppress(Exception):
                        override_create(run=run, created_by=None, mode="stop", reason="done")
                connection.close()
            web.stop()
            stop_worker(worker)
            app.conf.task_default_queue = before
            if prefix_before is None:
                del os.environ["PACER_CHANNELS_PREFIX"]
            else:
                os.environ["PACER_CHANNELS_PREFIX"] = prefix_before


def _stack_env(folder: Path, queue: str, runs_dir: Path) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return {
        **inherited,
        "DATABASE_URL": session_database_url(),
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(40),  # one key: sessions outlive a restart
        "PACER_VAR_DIR": str(folder / "var"),
        "PACER_RUNS_DIR": str(runs_dir),
        "PACER_CELERY_QUEUE": queue,
        "PACER_THROTTLE_PREFIX": f"pacer-throttle-{queue}",
        "PACER_OVERRIDE_RATE": "1000/minute",  # the latency test clicks 20 times a minute
    }


def _seed(engines: list[SimEngine]) -> None:
    for index, engine in enumerate(engines):
        engine_register(name=f"sim-engine-{index}", url=engine.url)
    users = get_user_model().objects
    grant(users.create_user(username=OPERATOR, password=PASSWORD), "operator")
    grant(users.create_user(username=VIEWER, password=PASSWORD), "viewer")
    connection.close()


def _collect_static(env: dict[str, str]) -> None:
    """With DEBUG off, whitenoise serves STATIC_ROOT: collect into the stack's own."""
    collected = subprocess.run(
        [str(VENV_BIN / "python"), "manage.py", "collectstatic", "--no-input", "-v", "0"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert collected.returncode == 0, collected.stderr


@pytest.fixture
def db_access(django_db_blocker: Any) -> Iterator[None]:
    """The test database, committed as it goes, shared with the stack's processes."""
    with django_db_blocker.unblock():
        yield
        connection.close()


@pytest.fixture(scope="module")
def browser(stack: Stack) -> Iterator[Browser]:
    """Started after the stack, whose processes must not inherit the variable set here; one
    per test module, because while Playwright's sync API is open its event loop runs in this
    thread, and every asyncio test after it in the session would find that loop running."""
    assert CHROMIUM.exists(), (
        f"{CHROMIUM} is missing: ./scripts/test installs Debian's chromium (apt-get install "
        "chromium), or set PACER_CHROMIUM"
    )
    # Playwright's sync API keeps an event loop running in this thread, which makes Django
    # refuse the test code's own ORM calls; the servers under test keep the check.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        # launch() gives every browser a fresh, temporary user data dir of its own.
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield launched
        launched.close()
    del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]


def sign_in(context: BrowserContext, stack: Stack, username: str) -> Page:
    page = context.new_page()
    page.goto(f"{stack.web.url}/signin/")
    page.fill("#username", username)
    page.fill("#password", PASSWORD)
    page.click("#signin")
    page.wait_for_url(f"{stack.web.url}/")
    return page


@contextlib.contextmanager
def signed_in_page(browser: Browser, stack: Stack, username: str) -> Iterator[Page]:
    """A page signed in as ``username`` in a context of its own; a script error on any of
    its pages fails the test."""
    context = browser.new_context(viewport={"width": 1500, "height": 1100})
    errors: list[str] = []
    context.on("weberror", lambda error: errors.append(error.error.stack or str(error.error)))
    try:
        yield sign_in(context, stack, username)
    finally:
        context.close()
    assert errors == [], errors


@pytest.fixture
def operator_page(browser: Browser, stack: Stack) -> Iterator[Page]:
    with signed_in_page(browser, stack, OPERATOR) as page:
        yield page


@pytest.fixture
def viewer_page(browser: Browser, stack: Stack) -> Iterator[Page]:
    with signed_in_page(browser, stack, VIEWER) as page:
        yield page


def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
