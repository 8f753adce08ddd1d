"""Origins as the websocket check compares them: scheme, host and port, never the host alone."""

from __future__ import annotations

import pytest

from controlplane.ws_origins import origin_allowed, parse_origin, served_origin

HOSTS = ["localhost", "127.0.0.1", "pacer.example.org"]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("http://127.0.0.1:8000", ("http", "127.0.0.1", 8000)),
        ("HTTPS://Pacer.Example.org", ("https", "pacer.example.org", 443)),
        ("http://[::1]:80", ("http", "::1", 80)),
        ("null", None),
        ("file://", None),
        ("http://host:99999", None),
        ("http://host/page", None),
    ],
)
def test_origins_parse_to_scheme_host_and_port(text: str, parsed: object) -> None:
    assert parse_origin(text) == parsed


def test_the_served_origin_is_the_host_the_request_was_sent_to_if_it_is_allowed() -> None:
    assert served_origin("127.0.0.1:8000", False, HOSTS) == ("http", "127.0.0.1", 8000)
    assert served_origin("pacer.example.org", True, HOSTS) == ("https", "pacer.example.org", 443)
    assert served_origin("rebound.attacker.test:8000", False, HOSTS) is None
    assert served_origin("", False, HOSTS) is None


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://127.0.0.1:8000", True),
        ("http://127.0.0.1:8001", False),
        ("https://127.0.0.1:8000", False),
        ("http://localhost:8000", False),
        ("http://localhost:9999", True),  # named in the trusted list
        ("null", False),
        (None, True),  # no browser: nothing of a user's to borrow
    ],
)
def test_only_the_served_address_and_trusted_origins_are_allowed(
    origin: str | None, allowed: bool
) -> None:
    served = ("http", "127.0.0.1", 8000)
    assert origin_allowed(origin, served, ["http://localhost:9999"]) is allowed
