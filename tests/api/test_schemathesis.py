"""Schemathesis against /api/schema/: every operation, with generated valid and invalid input,
as an operator, through the real WSGI application on PostgreSQL. It must never see a 500,
an undocumented status, or a response that breaks the schema.

Each operation gets ``EXAMPLES`` cases (half valid, half not), the same ones every run, so it
takes a minute or two and a failure reproduces. (Driven by Hypothesis directly: schemathesis'
pytest plugin does not run on pytest 9.) The one check left out is
``positive_data_acceptance``: a body the schema allows (any JSON object for a run config) may
still be refused by the run config's own rules, with a 400 naming the fields.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import positive_data_acceptance

from controlplane.runs.api.throttles import CommandRateThrottle
from controlplane.runs.models import Engine, Override, RunState
from tests.api.conftest import Account, make_decisions, make_run
from tests.api.test_bad_input import EDGE_OF_TIME, HUGE, crafted

pytestmark = pytest.mark.django_db
EXAMPLES = 40  # per operation: about 1,000 requests in all


@schemathesis.serializer("application/toml")
def _toml(ctx: Any, value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")


@pytest.fixture
def api_schema(operator: Account) -> Iterator[Any]:
    # The WSGI app runs in this thread on the test's connection: Django's own test client
    # keeps a request from closing it, and so must this.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    CommandRateThrottle.THROTTLE_RATES = {"override": "100000/minute"}
    try:
        for pk in (1, 2, 3):  # small ids, which generated path parameters often hit
            run = make_run(id=pk, state=RunState.RUNNING, config={"name": f"r{pk}"}, cap=32)
            make_decisions(run, 5)
        Override.objects.create(run_id=1, mode="pin", cap=8, ttl_s=5.0)
        Engine.objects.create(name="0", url="http://127.0.0.1:8100")
        yield schemathesis.openapi.from_wsgi("/api/schema/", WSGIHandler())
    finally:
        del CommandRateThrottle.THROTTLE_RATES
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def test_the_api_keeps_to_its_schema(api_schema: Any, operator: Account) -> None:
    headers = {"Authorization": f"Token {operator.token}"}
    failures: list[str] = []
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 20  # every endpoint is in the schema
    cases = sum(
        _fuzz(operation, mode, headers, failures)
        for operation in operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    )
    print(
        f"\nschemathesis: {len(operations)} operations, {cases} requests, {len(failures)} failures"
    )
    distinct = sorted({f.split("\n\n", 1)[0] + " | " + _first_check(f) for f in failures})
    assert not failures, f"{len(failures)} failures, distinct:\n" + "\n".join(distinct)


# Inputs that once answered 500, sent as they are besides the generated ones: (path, method,
# the case's parts, the status expected).
RUN = {"run_id": 1}
KNOWN_BAD = [
    ("/api/runs/", "POST", {"body": f"name = 'x'\nbatch_size = {HUGE}\n"}, 400),
    ("/api/runs/", "GET", {"query": {"page_size": HUGE}}, 400),
    ("/api/runs/", "GET", {"query": {"cursor": crafted("p=abc")}}, 404),
    ("/api/runs/", "GET", {"query": {"created_after": EDGE_OF_TIME}}, 400),
    ("/api/runs/{run_id}/steps/", "GET", {"query": {"cursor": crafted("p=abc")}}, 404),
    ("/api/runs/{run_id}/decisions/", "GET", {"query": {"cursor": crafted("p=abc")}}, 404),
    ("/api/runs/{run_id}/overrides/", "GET", {"query": {"cursor": crafted("p=abc")}}, 404),
    ("/api/runs/{run_id}/decisions/", "GET", {"query": {"since": EDGE_OF_TIME}}, 400),
    ("/api/runs/{run_id}/samples/", "GET", {"query": {"since": EDGE_OF_TIME}}, 400),
]


def test_inputs_that_once_answered_500_keep_to_the_schema(
    api_schema: Any, operator: Account
) -> None:
    headers = {"Authorization": f"Token {operator.token}"}
    for path, method, parts, expected in KNOWN_BAD:
        operation = api_schema[path][method]
        media = {"media_type": "application/toml"} if "body" in parts else {}
        params = {"path_parameters": RUN} if "{run_id}" in path else {}
        case = operation.Case(**params, **media, **parts)
        response = case.call_and_validate(
            headers=headers, excluded_checks=[positive_data_acceptance]
        )
        assert response.status_code == expected, (path, parts, response.text)
        assert isinstance(response.json()["detail"], str)


def _fuzz(
    operation: Any, mode: GenerationMode, headers: dict[str, str], failures: list[str]
) -> int:
    """Send ``EXAMPLES // 2`` generated cases to one operation; the number sent."""
    sent = 0

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES // 2,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,  # the same cases every run: a failure is reproducible
        database=None,
    )
    def check(case: Any) -> None:
        nonlocal sent
        sent += 1
        try:
            case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance])
        except (AssertionError, FailureGroup) as failed:
            failures.append(f"{operation.label} ({mode}): {failed}")

    try:
        check()
    except Unsatisfiable:  # no invalid input exists (an operation without parameters)
        assert mode is GenerationMode.NEGATIVE, operation.label
    return sent


def _first_check(failure: str) -> str:
    lines = [line.strip() for line in failure.splitlines()]
    return next((line for line in lines if line.startswith("- ")), "?")
