"""The landing page: for signed-in users, with the stack's checks and the newest runs."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from controlplane.runs.models import Run

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


def test_an_anonymous_visitor_is_sent_to_sign_in(client: Client) -> None:
    Run.objects.create(name="secret-sweep", config={})
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=/"


def test_a_signed_in_user_sees_the_checks_and_the_runs(client: Client) -> None:
    client.force_login(get_user_model().objects.create_user(username="operator"))
    Run.objects.create(name="gsm8k-rollouts", config={})
    page = client.get("/").content.decode()
    assert "database: ok" in page
    assert "redis: ok" in page
    assert "gsm8k-rollouts" in page
