"""The pacer policy went from 25 thresholds to 12: a stored run that set a retired one would
no longer parse, and its worker could not resume it. Each stored config loses the retired keys
of ``[concurrency.pacer]`` (the new policy derives those lines from the twelve), and
``preemption_factor``, the one with a single successor, becomes ``cut_factor``.

The list is written out here, not imported: a migration must keep meaning what it meant when it
was written, whatever the code's list becomes. Going back leaves the configs as they are: the
older policy reads the twelve's defaults for the keys that are gone.
"""

from django.db import migrations

RETIRED = (
    "cruise_kv_usage",
    "shed_kv_usage",
    "trim_polls",
    "queue_polls",
    "trim_hysteresis_polls",
    "growth_kv_polls",
    "escalation_polls",
    "preemption_factor",
    "queue_factor",
    "escalated_factor",
    "eviction_factor",
    "hit_min_kv_usage",
    "hit_baseline_weight",
    "probe_step",
    "hold_turnovers",
)
RENAMED = {"preemption_factor": "cut_factor"}


def upgraded(pacer: dict) -> dict:
    kept = {key: value for key, value in pacer.items() if key not in RETIRED}
    for old, new in RENAMED.items():
        if old in pacer and new not in kept:
            kept[new] = pacer[old]
    return kept


def retire(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    for run in Run.objects.filter(config__concurrency__has_key="pacer").iterator():
        concurrency = run.config.get("concurrency")
        pacer = concurrency.get("pacer") if isinstance(concurrency, dict) else None
        if not isinstance(pacer, dict) or not any(key in pacer for key in RETIRED):
            continue
        concurrency["pacer"] = upgraded(pacer)
        run.save(update_fields=["config"])


class Migration(migrations.Migration):
    dependencies = [("runs", "0017_pool_claim_overload")]

    operations = [migrations.RunPython(retire, migrations.RunPython.noop)]
