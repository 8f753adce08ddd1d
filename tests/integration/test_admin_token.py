"""The admin's API token is printed once, when it is made (scripts/run and docker compose run
ensure_admin at every start, and their logs last), or when asked for."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token

from tests.integration.commands import manage

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def test_the_admins_token_is_printed_when_made_and_on_request_only() -> None:
    first = manage("ensure_admin")
    assert first.returncode == 0, first.stderr
    key = Token.objects.get(user__username="admin").key
    assert key in first.stdout and "password:" in first.stdout
    again = manage("ensure_admin")
    assert again.returncode == 0, again.stderr
    assert key not in again.stdout and "--show-token" in again.stdout
    asked = manage("ensure_admin", "--show-token")
    assert f"API token: {key}" in asked.stdout
