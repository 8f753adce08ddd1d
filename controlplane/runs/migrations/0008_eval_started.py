from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_controller_state_at"),
    ]

    operations = [
        migrations.AlterField(
            model_name="evalrecord",
            name="finished_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
