"""Data migrations, run forward over rows written by the schema before them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from controlplane.runs.models import Run
from controlplane.runs.services import run_config_resolve
from workers.core.config.fields import ConfigError

pytestmark = [pytest.mark.integration, pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]

BEFORE = ("runs", "0017_pool_claim_overload")
RETIRING = ("runs", "0018_retire_pacer_thresholds")

OLD_PACER = {
    "target_kv_usage": 0.85,
    "trim_kv_usage": 0.9,
    "trim_polls": 2,
    "preemption_factor": 0.8,
    "escalated_factor": 0.5,
    "hold_turnovers": 3.0,
    "probe_step": 0.12,
}


def migrate(target: tuple[str, str]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    executor.loader.build_graph()
    return executor


def test_a_run_stored_with_the_25_threshold_pacer_is_resumable_after_the_upgrade() -> None:
    """The worker re-reads a run's stored config when it resumes it: a retired key left in it
    would fail the run. The migration drops them and keeps the settings that still exist."""
    document = {
        "name": "tuned",
        "env": [{"name": "arithmetic"}],
        "engine": [{"url": "http://engine:8000"}],
        "concurrency": {"policy": "pacer", "pacer": dict(OLD_PACER)},
    }
    untouched = {"name": "plain", "env": [{"name": "arithmetic"}], "engine": [{"url": "http://e"}]}
    old_state = migrate(BEFORE).loader.project_state([BEFORE]).apps
    OldRun = old_state.get_model("runs", "Run")
    tuned = OldRun.objects.create(name="tuned", config=document).pk
    plain = OldRun.objects.create(name="plain", config=untouched).pk
    with pytest.raises(ConfigError, match="is retired"):
        run_config_resolve(document)
    try:
        migrate(RETIRING)
        migrated = Run.objects.get(pk=tuned).config
        assert migrated["concurrency"]["pacer"] == {
            "target_kv_usage": 0.85,
            "trim_kv_usage": 0.9,
            "cut_factor": 0.8,
        }
        config, _ = run_config_resolve(migrated)
        assert (config.concurrency.pacer.cut_factor, config.concurrency.pacer.shed_kv_usage) == (
            0.8,
            pytest.approx(0.95),
        )
        assert Run.objects.get(pk=plain).config == untouched
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes("runs")[0])
