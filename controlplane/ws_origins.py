"""Which pages may open a websocket: the address the dashboard is served at, and the origins a
deployment names (``PACER_ALLOWED_ORIGINS``), each as scheme, host and port.

A browser sends the user's session cookie with any websocket a page opens, whatever site the
page is on, and it always says which page that is (``Origin``): so the origin must be the
served address, ``http(s)://<the Host the request was sent to>``, with that host one of
``ALLOWED_HOSTS`` (a name that resolves here by DNS rebinding is not). Matching the host name
alone (Channels' AllowedHostsOriginValidator) let a page on ``http://localhost:9999`` in.
A client that sends no Origin is no browser, and brings no cookie a page could lend it: the
``pacer`` CLI authenticates with its token.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]  # scheme, host, port


def parse_origin(text: str) -> Origin | None:
    """``scheme://host[:port]`` as a comparable triple; None for anything else (``null``)."""
    parts = urlsplit(text.strip().lower())
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        return None
    return parts.scheme, parts.hostname, port


def served_origin(host_header: str, secure: bool, allowed_hosts: Sequence[str]) -> Origin | None:
    """The origin of a page served from the address this request was sent to, if that host is
    one the deployment serves."""
    domain, _ = split_domain_port(host_header)
    if not domain or not validate_host(domain, allowed_hosts):
        return None
    return parse_origin(f"{'https' if secure else 'http'}://{host_header}")


def origin_allowed(origin: str | None, served: Origin | None, trusted: Iterable[str]) -> bool:
    if origin is None:
        return True
    found = parse_origin(origin)
    if found is None:
        return False
    return found == served or found in {parse_origin(t) for t in trusted}


class SameOriginValidator:
    """Lets a websocket through to ``application`` only from an allowed origin."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        headers = {n.decode("latin1"): v.decode("latin1") for n, v in scope.get("headers", [])}
        secure = scope.get("scheme") == "wss" or settings.PACER_HTTPS
        served = served_origin(headers.get("host", ""), secure, settings.ALLOWED_HOSTS)
        if origin_allowed(headers.get("origin"), served, settings.PACER_ALLOWED_ORIGINS):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
