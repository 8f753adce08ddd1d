"""DEBUG is off unless asked for, and even a debug page never shows a credential: not in the
settings it lists, not in the request's environment, not in a frame's local variables."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.conftest import fresh

pytestmark = pytest.mark.integration

PASSWORD = "hunter2-in-redis"
URL = f"redis://:{PASSWORD}@redis.internal:6379/0"


def test_debug_is_off_unless_asked_for() -> None:
    code = "from django.conf import settings; print(settings.DEBUG)"
    shown = fresh("-c", code)
    assert shown.stdout.strip() == "False", shown.stderr
    asked = fresh("-c", code, DEBUG="1")
    assert asked.stdout.strip() == "True", asked.stderr


def test_a_deployment_without_a_secret_key_of_its_own_fails_the_deploy_check() -> None:
    refused = fresh("manage.py", "check", "--deploy")
    assert refused.returncode != 0 and "pacer.E001" in refused.stderr
    assert "pacer.E001" not in fresh("manage.py", "check", "--deploy", SECRET_KEY="k" * 50).stderr


@pytest.mark.urls("tests.integration.failing_urls")
def test_a_debug_page_shows_no_password_of_any_setting_or_variable(settings: Any) -> None:
    settings.DEBUG = True
    settings.REDIS_URL = settings.CELERY_BROKER_URL = settings.CELERY_RESULT_BACKEND = URL
    settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": URL}}
    layer = settings.CHANNEL_LAYERS["default"]
    hosts = [{**host, "address": URL} for host in layer["CONFIG"]["hosts"]]
    settings.CHANNEL_LAYERS = {"default": {**layer, "CONFIG": {**layer["CONFIG"], "hosts": hosts}}}
    page = Client(raise_request_exception=False).get(
        "/fails/", HTTP_X_UPSTREAM=f"postgres://pacer:{PASSWORD}@db.internal/pacer"
    )
    assert page.status_code == 500
    text = page.content.decode()
    assert "the broker went away" in text and "CELERY_BROKER_URL" in text  # the debug page
    assert "redis.internal:6379" in text  # where it points is shown
    assert PASSWORD not in text
