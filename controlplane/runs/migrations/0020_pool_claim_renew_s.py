"""Pool claims state how often their host renews them, so that another host can tell a claim
renewed late (its host may be dead) from one renewed on time. A claim written before this
states the default poll period until its host's next look rewrites it."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0019_pool_claim_level"),
    ]

    operations = [
        migrations.AddField(
            model_name="poolclaim",
            name="renew_s",
            field=models.FloatField(default=5.0),
            preserve_default=False,
        ),
    ]
