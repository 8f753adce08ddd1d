"""What an error report (Django's debug page, an error mail) may show.

Django's own filter hides settings and request headers by name (``SECRET_KEY``, anything with
``PASS`` or ``TOKEN`` in it). Pacer's settings also hold credentials inside URLs, under names
no such rule catches: ``REDIS_URL``, ``CELERY_BROKER_URL``, the caches' ``LOCATION``, the
channel layer's ``hosts``, a ``DATABASE_URL`` in a process's environment. So every value shown
(settings, the request's environment, each frame's local variables) also loses the user
information of any URL in it: where a service is stays readable, how to log in to it does not.
"""

from __future__ import annotations

import re
from typing import Any

from django.template.defaultfilters import pprint
from django.views.debug import SafeExceptionReporterFilter

# scheme://user:password@host -> scheme://********@host (RFC 3986: userinfo ends at the last
# "@" before the path, and holds no "/", "?" or "#").
_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^/?#@\s]*@", re.IGNORECASE)
HIDDEN = "********"


def without_credentials(text: str) -> str:
    """``text`` with the user information of every URL in it replaced."""
    return _USERINFO.sub(rf"\g<scheme>{HIDDEN}@", text)


class _Shown:
    """A frame variable as the report prints it, once credentials are taken out."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


class CredentialsFilter(SafeExceptionReporterFilter):
    """Django's filter, plus credentials inside URLs wherever a value holds one."""

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        cleansed = super().cleanse_setting(key, value)  # recurses into dicts, lists, tuples
        return without_credentials(cleansed) if isinstance(cleansed, str) else cleansed

    def get_traceback_frame_variables(self, request: Any, tb_frame: Any) -> list[tuple[str, Any]]:
        shown: list[tuple[str, Any]] = []
        for name, value in super().get_traceback_frame_variables(request, tb_frame):
            text = pprint(value)
            cleaned = without_credentials(text)
            shown.append((name, value if cleaned == text else _Shown(cleaned)))
        return shown
