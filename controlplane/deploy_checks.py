"""What `manage.py check --deploy` asks of a deployment beyond Django's own checks."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register


@register(Tags.security, deploy=True)
def secret_key_given(**kwargs: Any) -> list[Error]:
    """A key of the deployment's own: one made per process (the fallback) signs everyone out
    at each restart and splits sessions between web processes."""
    if settings.PACER_SECRET_KEY_GIVEN:
        return []
    return [
        Error(
            "SECRET_KEY is not set: each process signs sessions with a key of its own",
            hint="set SECRET_KEY to one long random string shared by every web process",
            id="pacer.E001",
        )
    ]
