"""GET /api/pools/: the runs sharing engines now, grouped as the arbiter groups them, from
the claims it counts only (fresh, of hosted runs), readable by viewers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.runs.models import CLAIM_TTL_S, PoolClaim, Run, RunState
from tests.api.conftest import make_run
from workers.core.sharing import Claim, arbitrate
from workers.runtime.claims import exchange
from workers.runtime.lease import LEASE_TTL_S

pytestmark = pytest.mark.django_db

E0, E1, E2 = "http://127.0.0.1:8001", "http://127.0.0.1:8002", "http://127.0.0.1:8003"
HOUR = timedelta(hours=1)


def claim(run: Run, engines: list[str], *, age_s: float = 1.0, **fields: Any) -> PoolClaim:
    updated_at = timezone.now() - timedelta(seconds=age_s)
    values: dict[str, Any] = dict(
        weight=1.0, priority=0, demand=100, inflight=50, max_inflight=500, level=100.0, renew_s=5.0,
        ceiling=None, owner="host", since=updated_at - timedelta(minutes=5),
    )  # fmt: skip
    values.update(fields)
    return PoolClaim.objects.create(run=run, engines=engines, updated_at=updated_at, **values)


def test_a_claim_lives_as_long_as_a_lease() -> None:
    assert CLAIM_TTL_S == LEASE_TTL_S


def test_a_host_states_how_often_it_renews_and_reads_how_late_each_claim_is() -> None:
    hosted = make_run(name="hosted", lease_owner="me", lease_expires_at=timezone.now() + HOUR)
    late = make_run(name="late")
    claim(late, [E0], age_s=8.0, renew_s=5.0)  # its host missed a renewal
    mine = Claim(
        run_id=hosted.pk, engines=frozenset({E0}), weight=1.0, priority=0, demand=10,
        inflight=10, max_inflight=100, level=50.0, renew_s=0.5,
    )  # fmt: skip
    found = {c.run_id: c for c in exchange(hosted.pk, "me", mine)}
    assert PoolClaim.objects.get(run=hosted).renew_s == 0.5
    assert found[hosted.pk].age < 1.0 and not found[hosted.pk].overdue
    assert 8.0 <= found[late.pk].age < 9.0 and found[late.pk].overdue
    share = arbitrate(hosted.pk, list(found.values()))
    assert share is not None and not share.counted  # its episodes may have died with it


def test_pools_group_runs_on_overlapping_engines_and_leave_out_claims_that_do_not_count(
    viewer_client: APIClient,
) -> None:
    first = make_run(name="train")
    second = make_run(RunState.STOPPING, name="eval")
    long_ago = timezone.now() - timedelta(hours=1)
    claim(first, [E0, E1], weight=2.0, priority=1, inflight=140, ceiling=200, level=290.0)
    # renewed every 5 s, last 10 s ago: overdue
    claim(second, [E1], demand=80, inflight=60, ceiling=100, level=300.4, since=long_ago,
          footprint=640.5, age_s=10.0)  # fmt: skip
    claim(make_run(name="alone"), [E2], ceiling=None)
    stale = make_run(name="stale")
    claim(stale, [E0], age_s=CLAIM_TTL_S + 5, ceiling=50)
    claim(make_run(RunState.COMPLETED, name="ended"), [E0, E1], ceiling=50)
    claim(make_run(RunState.PAUSED, name="paused"), [E1], ceiling=50)

    answer = viewer_client.get("/api/pools/")
    assert answer.status_code == 200, answer.content
    (pool,) = answer.json()
    # the eval run was hosted first: its controller sizes the pool, at its level
    assert (pool["engines"], pool["level"], pool["leader"]) == ([E0, E1], 300, second.pk)
    runs = [
        (r["id"], r["name"], r["weight"], r["priority"], r["demand"], r["inflight"], r["ceiling"])
        for r in pool["runs"]
    ]
    assert runs == [
        (first.pk, "train", 2.0, 1, 100, 140, 200),
        (second.pk, "eval", 1.0, 0, 80, 60, 100),
    ]
    assert [r["footprint"] for r in pool["runs"]] == [None, 640.5]
    assert all(r["updated_at"] for r in pool["runs"])
    assert [r["overdue"] for r in pool["runs"]] == [False, True]


def test_runs_on_engines_that_do_not_overlap_are_separate_pools(viewer_client: APIClient) -> None:
    a, b, c, d = (make_run(name=name) for name in "abcd")
    claim(a, [E0])
    claim(b, [E0])
    claim(c, [E1, E2])
    claim(d, [E2])
    pools = viewer_client.get("/api/pools/").json()
    assert [[r["id"] for r in p["runs"]] for p in pools] == [[a.pk, b.pk], [c.pk, d.pk]]
    assert [p["engines"] for p in pools] == [[E0], [E1, E2]]
    assert [p["leader"] for p in pools] == [a.pk, c.pk]  # each hosted first in its pool


def test_no_pool_is_an_empty_list_and_signing_in_is_needed(
    viewer_client: APIClient, anonymous: APIClient
) -> None:
    claim(make_run(name="alone"), [E0])
    assert viewer_client.get("/api/pools/").json() == []
    assert anonymous.get("/api/pools/").status_code == 401


def test_a_run_sharing_with_two_that_share_nothing_shows_as_its_own_pool(
    viewer_client: APIClient,
) -> None:
    left, middle, right = (make_run(name=name) for name in ("left", "middle", "right"))
    claim(left, [E0])
    claim(middle, [E0, E1])
    claim(right, [E1])
    pools = viewer_client.get("/api/pools/").json()
    assert [[r["id"] for r in p["runs"]] for p in pools] == [[left.pk, middle.pk, right.pk]]
