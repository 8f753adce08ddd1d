"""Pool claims state the pool's level (the leader's controller sizes the pool) instead of the
readings the old rule derived a capacity from. Claims live a lease's life: the old rows are
dropped, and each host writes its run's claim again at its next look."""

from django.db import migrations, models
from django.utils import timezone


def drop_claims(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("runs", "PoolClaim").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0018_retire_pacer_thresholds"),
    ]

    operations = [
        migrations.RunPython(drop_claims, migrations.RunPython.noop),
        migrations.RemoveField(model_name="poolclaim", name="loaded"),
        migrations.RemoveField(model_name="poolclaim", name="overloaded"),
        migrations.RemoveField(model_name="poolclaim", name="queued"),
        migrations.RemoveField(model_name="poolclaim", name="capacity"),
        migrations.AddField(
            model_name="poolclaim",
            name="max_inflight",
            field=models.PositiveIntegerField(default=1),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="poolclaim",
            name="level",
            field=models.FloatField(default=0.0),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="poolclaim",
            name="footprint",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="poolclaim",
            name="completed",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="poolclaim",
            name="owner",
            field=models.CharField(default="", max_length=200),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="poolclaim",
            name="since",
            field=models.DateTimeField(default=timezone.now),
            preserve_default=False,
        ),
    ]
