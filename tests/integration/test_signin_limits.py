"""Sign-in attempts are limited per user name and per address, on the dashboard's form and the
admin's alike, counted in Redis: forty wrong passwords no longer leave the forty-first try
answered as the first was. A sign-in that succeeds is no failure."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

PASSWORD = "correct horse battery"


@pytest.fixture(autouse=True)
def limits(settings: Any) -> None:
    """Counts of this test's own, and small limits, so a test needs few attempts."""
    settings.PACER_THROTTLE_PREFIX = f"pacer-test-{uuid.uuid4().hex}"
    settings.PACER_SIGNIN_FAILURES_PER_USER = "5/hour"
    settings.PACER_SIGNIN_FAILURES_PER_ADDRESS = "8/hour"


def attempt(client: Client, username: str, password: str, path: str = "/signin/") -> Any:
    return client.post(path, {"username": username, "password": password, "next": "/"})


def test_wrong_passwords_for_one_user_name_lock_it_for_a_while_even_for_the_right_one() -> None:
    get_user_model().objects.create_user(username="olga", password=PASSWORD)
    client = Client()
    answers = [attempt(client, "olga", f"guess-{n}").status_code for n in range(40)]
    assert answers[:5] == [200] * 5  # the form again, saying the password does not match
    assert set(answers[5:]) == {429}
    refused = attempt(client, "olga", PASSWORD)
    assert refused.status_code == 429 and "Too many failed sign-ins" in refused.content.decode()
    assert 0 < int(refused["Retry-After"]) <= 3600
    assert "_auth_user_id" not in client.session
    other = Client(REMOTE_ADDR="10.0.0.7")  # another address, the same user name: locked too
    assert attempt(other, "olga", PASSWORD).status_code == 429


def test_one_address_guessing_many_user_names_is_stopped_too() -> None:
    get_user_model().objects.create_user(username="victor", password=PASSWORD)
    client = Client()
    for n in range(8):
        assert attempt(client, f"nobody-{n}", "x").status_code == 200
    assert attempt(client, "victor", PASSWORD).status_code == 429
    elsewhere = Client(REMOTE_ADDR="10.0.0.8")
    assert attempt(elsewhere, "victor", PASSWORD).status_code == 302  # victor has no failures


def test_the_admins_sign_in_counts_and_is_limited_alike() -> None:
    get_user_model().objects.create_superuser(username="root", password=PASSWORD)
    client = Client()
    for n in range(3):
        attempt(client, "root", f"guess-{n}", "/admin/login/")
    for n in range(2):
        attempt(client, "root", f"guess-{n}")
    refused = attempt(client, "root", PASSWORD, "/admin/login/?next=/admin/")
    assert "Too many failed sign-ins" in refused.content.decode()
    assert "_auth_user_id" not in client.session


def test_signing_in_is_no_failure_to_count() -> None:
    get_user_model().objects.create_user(username="olga", password=PASSWORD)
    for _ in range(12):
        client = Client()
        assert attempt(client, "olga", PASSWORD).status_code == 302
        assert client.post("/signout/").status_code == 302
