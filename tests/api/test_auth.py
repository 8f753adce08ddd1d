"""Who may do what: 401 without credentials (token or session), 403 for a viewer's writes,
operators and superusers write; CSRF on session writes; pacer_user makes users with roles."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from controlplane.runs.models import Engine, Override, Run, RunState, StepRecord
from controlplane.runs.roles import OPERATOR, VIEWER, is_operator, role_of
from tests.api.conftest import T0, Account, make_run

pytestmark = pytest.mark.django_db

READS = [
    "/api/runs/",
    "/api/runs/{run}/",
    "/api/runs/{run}/decisions/",
    "/api/runs/{run}/samples/",
    "/api/runs/{run}/steps/",
    "/api/runs/{run}/evals/",
    "/api/runs/{run}/overrides/",
    "/api/runs/{run}/export/decisions/?format=csv",
    "/api/engines/",
    "/api/engines/e0/",
]
WRITES = [
    ("post", "/api/runs/", {"name": "x"}),
    ("post", "/api/runs/{run}/stop/", {}),
    ("post", "/api/runs/{run}/pause/", {}),
    ("post", "/api/runs/{run}/resume/", {}),
    ("post", "/api/runs/{run}/override/", {"mode": "set", "cap": 8}),
    ("post", "/api/runs/{run}/steps/1/ack/", {"policy_version": 1}),
    ("post", "/api/engines/", {"name": "e1", "url": "http://127.0.0.1:9"}),
    ("put", "/api/engines/e0/", {"url": "http://127.0.0.1:9"}),
    ("patch", "/api/engines/e0/", {"max_num_seqs": 8}),
    ("delete", "/api/engines/e0/", None),
]


@pytest.fixture
def run() -> Run:
    Engine.objects.create(name="e0", url="http://127.0.0.1:8100")
    return make_run(config={"name": "r", "trainer": {"mode": "external"}})


@pytest.mark.parametrize("path", READS)
def test_every_read_is_401_without_credentials_and_names_the_token_scheme(
    anonymous: APIClient, run: Run, path: str
) -> None:
    response = anonymous.get(path.format(run=run.pk))
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json() == {"detail": "Authentication credentials were not provided."}


@pytest.mark.parametrize("path", READS)
def test_a_viewer_reads_everything(viewer_client: APIClient, run: Run, path: str) -> None:
    assert viewer_client.get(path.format(run=run.pk)).status_code == 200


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_every_write_is_401_without_credentials(
    anonymous: APIClient, run: Run, method: str, path: str, body: object
) -> None:
    response = getattr(anonymous, method)(path.format(run=run.pk), body, format="json")
    assert response.status_code == 401


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_a_viewer_writing_is_403_and_nothing_changes(
    viewer_client: APIClient, run: Run, method: str, path: str, body: object
) -> None:
    response = getattr(viewer_client, method)(path.format(run=run.pk), body, format="json")
    assert response.status_code == 403
    assert "operator" in response.json()["detail"]
    assert not Override.objects.exists()
    assert Run.objects.count() == 1 and Run.objects.get().state == RunState.RUNNING
    assert Engine.objects.get(name="e0").url == "http://127.0.0.1:8100"


def test_an_invalid_token_is_401(run: Run) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    response = client.get("/api/runs/")
    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid token."}


def test_operators_and_superusers_write(operator: Account, admin: Account, run: Run) -> None:
    StepRecord.objects.create(
        run=run, step=1, started_at=T0, written_at=T0, seconds=1.0, policy_version=0,
        episodes=4, tokens=10, reward_mean=0.5, reward_std=0.1, generated_tokens=10,
        finished_train=4, finished_eval=0, failed=0, cancelled=0, dropped_groups=0, cap=8,
        inflight=8, path="/tmp/x",
    )  # fmt: skip
    for account in (operator, admin):
        client = account.client()
        set_cap = client.post(f"/api/runs/{run.pk}/override/", {"mode": "set", "cap": 8})
        assert set_cap.status_code == 202, set_cap.json()
        ack = client.post(f"/api/runs/{run.pk}/steps/1/ack/", {"policy_version": 1})
        assert ack.status_code == 200, ack.json()
        patched = client.patch("/api/engines/e0/", {"max_num_seqs": 16}, format="json")
        assert patched.status_code == 200 and patched.json()["max_num_seqs"] == 16
    assert [o.created_by for o in Override.objects.order_by("id")] == [operator.user, admin.user]


def test_a_session_user_reads_and_a_session_write_needs_the_csrf_token(
    operator: Account, run: Run
) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(operator.user)
    assert client.get(f"/api/runs/{run.pk}/").status_code == 200
    refused = client.post(f"/api/runs/{run.pk}/override/", {"mode": "set", "cap": 8})
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    assert not Override.objects.exists()
    client.get("/admin/login/")  # hands out the CSRF cookie, as the dashboard's pages do
    csrf = client.cookies["csrftoken"].value
    accepted = client.post(
        f"/api/runs/{run.pk}/override/", {"mode": "set", "cap": 8}, HTTP_X_CSRFTOKEN=csrf
    )
    assert accepted.status_code == 202, accepted.json()


def test_pacer_user_creates_a_viewer_with_a_working_token_and_changes_roles() -> None:
    out = io.StringIO()
    call_command("pacer_user", "vera", "--role", "viewer", stdout=out)
    vera = get_user_model().objects.get(username="vera")
    token = Token.objects.get(user=vera).key
    assert out.getvalue().splitlines() == ["user vera created, role viewer", f"API token: {token}"]
    assert role_of(vera) == VIEWER and not vera.has_usable_password()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/runs/").status_code == 200
    assert (
        client.post("/api/engines/", {"name": "x", "url": "http://127.0.0.1:1"}).status_code == 403
    )

    out = io.StringIO()
    call_command(
        "pacer_user", "vera", "--role", "operator", "--password", "plum orbit lantern", stdout=out
    )
    vera.refresh_from_db()
    assert out.getvalue().splitlines() == [
        "user vera updated, role operator",
        f"API token: {token}",
    ]
    assert is_operator(vera) and vera.check_password("plum orbit lantern")
    assert list(vera.groups.values_list("name", flat=True)) == [OPERATOR]
    assert (
        client.post("/api/engines/", {"name": "x", "url": "http://127.0.0.1:1"}).status_code == 201
    )


def test_a_user_in_no_group_reads_but_does_not_write(run: Run) -> None:
    user = get_user_model().objects.create_user(username="nobody")
    client = APIClient()
    client.force_authenticate(user)
    assert client.get("/api/runs/").status_code == 200
    assert client.post(f"/api/runs/{run.pk}/stop/", {}).status_code == 403


def test_drf_create_token_makes_a_token_that_authenticates(operator: Account) -> None:
    out = io.StringIO()
    call_command("drf_create_token", "-r", "olga", stdout=out)  # -r: a new key for the user
    key = Token.objects.get(user=operator.user).key
    assert key in out.getvalue() and key != operator.token
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/runs/").status_code == 200
    assert operator.client().get("/api/runs/").status_code == 401  # the old key is gone
