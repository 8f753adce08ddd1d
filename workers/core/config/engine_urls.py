"""What an engine's URL may be, and whether a deployment lets Pacer ask its host.

Pacer appends paths to an engine's URL (``/v1/models``, ``/metrics``, ``/v1/completions``) and
fetches them, from the web process when a run is created and from the worker while it runs.
So the URL is http or https, a host, an optional port and path, and nothing else: a query or
a fragment would swallow the appended path (``http://host/secret.txt#`` fetches
``/secret.txt``), and user information would be sent to wherever the URL points.

A deployment may also name the only hosts engines live on (``PACER_ENGINE_HOSTS``): entries
``host``, ``host:port`` or ``*.domain``, matched against the URL as written (no DNS lookup).
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import SplitResult, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


def engine_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an engine's URL, or None when it can."""
    if any(character.isspace() or ord(character) < 32 for character in url):
        return "must hold no spaces or control characters"
    parts = urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS:
        return f"must be an http(s) URL, got {url!r}"
    if "?" in url or "#" in url:
        return "must have no query or fragment ('?', '#'): Pacer's paths would end up in it"
    if "@" in parts.netloc:
        return "must have no user information (user:password@): give the engine's address only"
    if not parts.hostname:
        return "must name a host"
    if _port(parts) is None:
        return "has a port that is not a number from 1 to 65535"
    return None


def host_allowed(url: str, allowed: Sequence[str]) -> bool:
    """Whether ``url``'s host is on ``allowed`` (every host is when it is empty)."""
    if not allowed:
        return True
    parts = urlsplit(url)
    host, port = (parts.hostname or "").lower(), _port(parts)
    return any(_matches(entry, host, port) for entry in allowed)


def _matches(entry: str, host: str, port: int | None) -> bool:
    wanted = urlsplit(f"//{entry.strip()}")
    try:
        wanted_port = wanted.port
    except ValueError:
        return False
    pattern = (wanted.hostname or "").lower()
    if wanted_port is not None and wanted_port != port:
        return False
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


def _port(parts: SplitResult) -> int | None:
    try:
        port = parts.port
    except ValueError:
        return None
    return port or DEFAULT_PORTS.get(parts.scheme)
