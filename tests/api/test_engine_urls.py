"""Engine URLs the web process would fetch on an operator's say-so: nothing it fetches is
echoed back, a URL that would bend what it fetches (a query, a fragment, user info) is refused,
a port that answers and one that does not look alike, and with PACER_ENGINE_HOSTS set, only
the hosts on it are asked at all, for configs and registered engines alike."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.runs.models import Engine, Run
from tests.api.conftest import SimEngine, config_document
from tests.conftest import free_port

pytestmark = pytest.mark.django_db

SECRET = "internal-only: db password is hunter2"


@dataclass
class InternalPage:
    """A web server inside the network, not an engine: every path answers its secret."""

    url: str
    paths: list[str] = field(default_factory=list)


@pytest.fixture
def internal() -> Iterator[InternalPage]:
    page = InternalPage("")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page.paths.append(self.path)
            body = SECRET.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    page.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield page
    server.shutdown()
    server.server_close()


def refusal(client: APIClient, url: str) -> str:
    response = client.post("/api/runs/", config_document(url), format="json")
    assert response.status_code == 400, response.content
    assert not Run.objects.exists()
    return " ".join(response.json()["errors"]["engine[0].url"])


def test_nothing_the_engine_url_answers_is_echoed(
    operator_client: APIClient, internal: InternalPage
) -> None:
    message = refusal(operator_client, internal.url)
    assert SECRET not in message and "hunter2" not in message
    assert internal.paths == ["/v1/models"]


@pytest.mark.parametrize(
    "tail", ["/secret.txt#", "/secret.txt?", "/secret.txt?x=/v1/models", "/#frag"]
)
def test_a_query_or_fragment_that_would_bend_the_path_is_refused_unfetched(
    operator_client: APIClient, internal: InternalPage, tail: str
) -> None:
    message = refusal(operator_client, internal.url + tail)
    assert "query" in message or "fragment" in message, message
    assert SECRET not in message
    assert internal.paths == []


def test_user_info_in_an_engine_url_is_refused(
    operator_client: APIClient, internal: InternalPage
) -> None:
    message = refusal(operator_client, internal.url.replace("//", "//admin:pw@"))
    assert "user" in message
    assert internal.paths == []


def test_an_open_port_and_a_closed_one_answer_alike(
    operator_client: APIClient, internal: InternalPage
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    shown = [refusal(operator_client, url).replace(url, "URL") for url in (internal.url, closed)]
    assert shown[0] == shown[1], shown


def test_with_an_allow_list_other_hosts_are_refused_unasked(
    operator_client: APIClient,
    internal: InternalPage,
    sim_engine: SimEngine,
    settings: Any,
) -> None:
    settings.PACER_ENGINE_HOSTS = [sim_engine.url.removeprefix("http://")]
    message = refusal(operator_client, internal.url)
    assert "PACER_ENGINE_HOSTS" in message
    assert internal.paths == []
    allowed = operator_client.post("/api/runs/", config_document(sim_engine.url), format="json")
    assert allowed.status_code == 201, allowed.content


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8100/?a=b",
        "http://127.0.0.1:8100/#x",
        "http://user:pw@127.0.0.1:8100",
        "http://10.9.9.9:8100",  # not on the list below
    ],
)
def test_a_registered_engine_keeps_to_the_same_rules(
    operator_client: APIClient, settings: Any, url: str
) -> None:
    settings.PACER_ENGINE_HOSTS = ["127.0.0.1"]
    response = operator_client.post("/api/engines/", {"name": "e", "url": url})
    assert response.status_code == 400, response.content
    assert "url" in response.json()["errors"]
    assert not Engine.objects.exists()
    ok = operator_client.post("/api/engines/", {"name": "e", "url": "http://127.0.0.1:8100"})
    assert ok.status_code == 201, ok.content


def test_a_registered_engine_off_the_list_is_refused_when_a_run_names_it(
    operator_client: APIClient, settings: Any
) -> None:
    Engine.objects.create(name="old", url="http://10.9.9.9:8100")  # registered before the list
    settings.PACER_ENGINE_HOSTS = ["127.0.0.1"]
    document = {**config_document("http://127.0.0.1:9"), "engine": [{"name": "old"}]}
    response = operator_client.post("/api/runs/", document, format="json")
    assert response.status_code == 400
    assert "PACER_ENGINE_HOSTS" in " ".join(response.json()["errors"]["engine[0].name"])
