"""A recorded run read from the control plane's database, as the plain records
``bench.virtual.fit`` builds a workload from.

The only module of the benchmarks that touches Django: the rest runs without a database.
"""

from __future__ import annotations

import os
from typing import Any

from bench.virtual.fit import EngineSeen, RecordedRun, StepTotals


def setup_django() -> None:
    """Django with the settings ``manage.py`` uses, unless the caller chose others."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    django.setup()


def read_run(run_id: int) -> RecordedRun:
    """Run ``run_id``'s config, step totals and engines; LookupError when there is no such
    run. Django must be set up (``setup_django``)."""
    from django.db.models import Max, Min

    from controlplane.runs.models import Engine, EngineSample, Run, StepRecord

    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise LookupError(f"no run {run_id}")
    steps = StepRecord.objects.filter(run=run).order_by("step")
    span = steps.aggregate(first=Min("started_at"), last=Max("written_at"))
    start = run.started_at or span["first"]
    elapsed = (span["last"] - start).total_seconds() if start and span["last"] else 0.0
    seen = (
        EngineSample.objects.filter(run=run)
        .values("engine_id")
        .annotate(kv=Max("kv_capacity_tokens"), model_len=Max("max_model_len"), role=Max("role"))
    )
    configured = _configured_seqs(run.config)
    registered = {
        key: e.max_num_seqs
        for e in Engine.objects.filter(max_num_seqs__isnull=False)
        for key in (e.name, e.url)
    }
    return RecordedRun(
        run_id=run.pk,
        name=run.name,
        config=run.config,
        elapsed_s=elapsed,
        steps=[StepTotals(s.episodes, s.tokens) for s in steps],
        engines=[
            EngineSeen(
                engine_id=row["engine_id"],
                role=row["role"],
                kv_capacity_tokens=row["kv"],
                max_model_len=row["model_len"],
                max_num_seqs=configured.get(row["engine_id"], registered.get(row["engine_id"])),
            )
            for row in seen
        ],
    )


def _configured_seqs(config: dict[str, Any]) -> dict[str, int]:
    """``max_num_seqs`` per engine url and name, as the run's ``[[engine]]`` tables gave it."""
    found: dict[str, int] = {}
    for table in config.get("engine") or []:
        if isinstance(table, dict) and table.get("max_num_seqs"):
            for key in ("url", "name"):
                if table.get(key):
                    found[str(table[key])] = int(table["max_num_seqs"])
    return found
