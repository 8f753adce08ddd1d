"""Production's settings (DEBUG off, PACER_HTTPS=1, a SECRET_KEY of its own): `check --deploy`
has nothing to say, and the served stack behind a TLS proxy redirects plain HTTP, sends HSTS
and a Content-Security-Policy, and marks its cookies Secure, while health checks and
Prometheus still reach it over plain HTTP from inside."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import daphne_server, make_account
from tests.conftest import REPO_ROOT, VENV_BIN

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PRODUCTION = {"DEBUG": "false", "PACER_HTTPS": "1", "SECRET_KEY": secrets.token_urlsafe(50)}
BEHIND_TLS = {"X-Forwarded-Proto": "https"}  # what the proxy that terminates TLS sets


def test_check_deploy_has_nothing_to_say_with_productions_settings() -> None:
    done = subprocess.run(
        [str(VENV_BIN / "python"), "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO_ROOT,
        env={**os.environ, **PRODUCTION},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout, done.stdout + done.stderr


def test_behind_tls_the_stack_redirects_plain_http_and_marks_its_cookies_secure(
    tmp_path: Path, module_queue: str
) -> None:
    make_account("olga", "operator")  # password "pw"
    with daphne_server(tmp_path, module_queue, tmp_path / "runs", **PRODUCTION) as server:
        plain = httpx.get(f"{server.url}/signin/")
        assert plain.status_code == 301
        assert plain.headers["location"].startswith("https://127.0.0.1")
        for inside in ("/api/health/", "/metrics"):  # probes from inside the network
            assert httpx.get(f"{server.url}{inside}").status_code == 200, inside
        with httpx.Client(base_url=server.url, headers=BEHIND_TLS) as browser:
            page = browser.get("/signin/")
            assert page.status_code == 200
            assert page.headers["strict-transport-security"].startswith("max-age=31536000")
            policy = page.headers["content-security-policy"]
            assert "script-src 'self'" in policy and "unsafe-inline" not in policy
            assert "secure" in page.headers["set-cookie"].lower()  # the CSRF cookie
            token = page.cookies["csrftoken"]
            signed_in = browser.post(  # as a browser sends it over HTTPS to the proxy
                "/signin/",
                data={"username": "olga", "password": "pw", "next": "/"},
                headers={
                    "Cookie": f"csrftoken={token}",  # Secure: the client keeps it off plain HTTP
                    "X-CSRFToken": token,
                    "Referer": server.url.replace("http://", "https://") + "/signin/",
                },
            )
            assert signed_in.status_code == 302, signed_in.text
            session = [c for c in signed_in.headers.get_list("set-cookie") if "sessionid" in c]
            assert session and "secure" in session[0].lower()
