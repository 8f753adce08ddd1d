"""Engine URLs: what may be one, and which hosts an allow-list lets through."""

from __future__ import annotations

import pytest

from workers.core.config.engine_urls import engine_url_problem, host_allowed


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8100", "https://gpu-1.internal/", "http://[::1]:8000/prefix/v1-gateway"],
)
def test_plain_urls_are_engine_urls(url: str) -> None:
    assert engine_url_problem(url) is None


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("ftp://host", "http(s)"),
        ("host:8100", "http(s)"),
        ("http://host/secret.txt#", "fragment"),
        ("http://host/?", "query"),
        ("http://admin:pw@host", "user information"),
        ("http://@host", "user information"),
        ("http://:8100", "host"),
        ("http://host:99999", "port"),
        ("http://host:http", "port"),
        ("http://host/a b", "spaces"),
        ("http://host/\x00", "control"),
    ],
)
def test_urls_that_would_bend_what_is_fetched_are_refused(url: str, said: str) -> None:
    problem = engine_url_problem(url)
    assert problem is not None and said in problem


@pytest.mark.parametrize(
    ("url", "allowed", "expected"),
    [
        ("http://10.0.0.5:8000", [], True),
        ("http://10.0.0.5:8000", ["10.0.0.5"], True),
        ("http://10.0.0.5:8000", ["10.0.0.5:8000"], True),
        ("http://10.0.0.5:8001", ["10.0.0.5:8000"], False),
        ("http://10.0.0.6:8000", ["10.0.0.5"], False),
        ("http://gpu-3.cluster.internal:8000", ["*.cluster.internal"], True),
        ("http://cluster.internal:8000", ["*.cluster.internal"], False),
        ("http://evilcluster.internal:8000", ["*.cluster.internal"], False),
        ("http://GPU-3.Cluster.Internal", ["*.cluster.internal:80"], True),
        ("https://gpu-3.cluster.internal", ["*.cluster.internal:443"], True),
        ("http://[::1]:8100", ["[::1]:8100"], True),
        ("http://127.0.0.1:8100", ["bad:port:entry"], False),
    ],
)
def test_the_allow_list_matches_hosts_and_ports_as_written(
    url: str, allowed: list[str], expected: bool
) -> None:
    assert host_allowed(url, allowed) is expected
