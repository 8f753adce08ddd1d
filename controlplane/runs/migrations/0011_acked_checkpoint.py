from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0010_host_failures"),
    ]

    operations = [
        migrations.AddField(
            model_name="steprecord",
            name="acked_checkpoint",
            field=models.CharField(
                blank=True,
                default="",
                help_text="the folder of the acknowledged version's weights; empty when none was sent",
                max_length=1000,
            ),
        ),
    ]
