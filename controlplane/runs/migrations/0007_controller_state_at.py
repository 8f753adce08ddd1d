from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0006_run_idempotency_key"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="controller_state_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
