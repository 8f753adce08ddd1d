"""Pool claims state how often their host renews them, so that another host can tell a claim
renewed late (its host may be dead) from one renewed on time. A claim written before this, or
by a host of the release before during a rolling upgrade, states the default poll period: the
column's own default, since such a host inserts no value."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0019_pool_claim_level"),
    ]

    operations = [
        migrations.AddField(
            model_name="poolclaim",
            name="renew_s",
            field=models.FloatField(db_default=5.0),
        ),
    ]
