"""Every way a password is set keeps to Django's password rules (length, likeness to the user
name, common passwords, digits only): the management commands as the admin's forms do."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.integration.commands import manage

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


@pytest.mark.parametrize(
    ("username", "password"),
    [
        ("vera", "verapass1"),  # too short
        ("vera", "123456789012345"),  # digits only
        ("vera", "password1234"),  # common
        ("veronica.lang", "veronica.lang1"),  # too like the user name
    ],
)
def test_pacer_user_refuses_a_weak_password_and_creates_no_one(
    username: str, password: str
) -> None:
    done = manage("pacer_user", username, "--role", "viewer", "--password", password)
    assert done.returncode != 0
    assert "password is refused" in done.stderr and "Traceback" not in done.stderr
    assert not get_user_model().objects.filter(username=username).exists()


def test_pacer_user_takes_a_good_password() -> None:
    done = manage("pacer_user", "vera", "--role", "viewer", "--password", "plum orbit lantern")
    assert done.returncode == 0, done.stderr
    assert get_user_model().objects.get(username="vera").check_password("plum orbit lantern")


def test_ensure_admin_refuses_a_weak_password() -> None:
    done = manage("ensure_admin", "--password", "admin123")
    assert done.returncode != 0 and "too short" in done.stderr
    assert not get_user_model().objects.filter(username="admin").exists()
