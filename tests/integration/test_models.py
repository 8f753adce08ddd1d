"""Runs survive a round trip through real PostgreSQL, JSON config included."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from controlplane.runs.models import Run, RunState

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


def test_run_round_trips_through_postgresql() -> None:
    assert connection.vendor == "postgresql"
    owner = get_user_model().objects.create_user(username="operator", password="x")
    config = {"policy": "reference", "engines": ["http://127.0.0.1:8100"], "min_inflight": 1}
    created = Run.objects.create(name="gsm8k-rollouts", config=config, created_by=owner)

    loaded = Run.objects.get(pk=created.pk)

    assert loaded.name == "gsm8k-rollouts"
    assert loaded.config == config
    assert loaded.state == RunState.QUEUED
    assert loaded.created_by == owner
    assert loaded.group_name == f"run.{created.pk}"
    assert Run.objects.filter(config__policy="reference").count() == 1
