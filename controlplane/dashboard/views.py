"""The dashboard's pages. Each view checks who may see it and gathers what the template and
the page's script need; reading live figures and every write go through the REST API and the
run's websocket from the browser, so the page and the ``pacer`` CLI see the same thing."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from controlplane.alerts.conditions import AlertKind
from controlplane.dashboard import reads
from controlplane.health import check_database, check_redis
from controlplane.runs import selectors
from controlplane.runs.api.inputs import CompareFilters
from controlplane.runs.compare import NoSuchRuns, compare_runs
from controlplane.runs.config_diff import ABSENT
from controlplane.runs.models import CLAIM_TTL_S
from controlplane.runs.roles import is_operator, role_of
from controlplane.signin_limits import ThrottledSignIn
from workers.core.decisions import DecisionKind
from workers.core.members import DEFAULT_DRAIN_S, MAX_DRAIN_S
from workers.core.sharing import PRIORITY_RANGE, SHARE_RANGE

VIEWER_REASON = (
    "You are signed in as a viewer: commands need the operator role (ask an admin to run "
    "`python manage.py pacer_user NAME --role operator`)."
)


class SignIn(auth_views.LoginView):
    """The dashboard's own sign-in page (the admin's is for staff accounts only); attempts
    over the limits are answered 429 with Retry-After (controlplane.signin_limits)."""

    template_name = "signin.html"
    redirect_authenticated_user = True
    form_class = ThrottledSignIn

    def form_invalid(self, form: ThrottledSignIn) -> HttpResponse:  # type: ignore[override]
        response = super().form_invalid(form)
        if form.retry_after_s is not None:
            response.status_code = 429
            response["Retry-After"] = str(form.retry_after_s)
        return response


class SignOut(auth_views.LogoutView):
    """Signs out on POST (Django refuses a GET: a link must not sign anyone out)."""


def _common(request: HttpRequest) -> dict[str, Any]:
    return {"role": role_of(request.user), "operator": is_operator(request.user)}


@login_required
def runs_list(request: HttpRequest) -> HttpResponse:
    page, rows = reads.runs_page(request.GET.get("page"))
    context = {
        **_common(request),
        "page": page,
        "rows": rows,
        "sparklines": {str(row.run.pk): row.sparkline for row in rows},
        "checks": {"database": check_database(), "redis": check_redis()},
    }
    return render(request, "dashboard/runs.html", context)


@login_required
def alerts(request: HttpRequest) -> HttpResponse:
    context = {
        **_common(request),
        **reads.alerts_page(),
        "kinds": [kind.value for kind in AlertKind],
        "page_data": {"api": {"rules": reverse("alerts-api:rule-list")}},
    }
    return render(request, "dashboard/alerts.html", context)


@login_required
def pools(request: HttpRequest) -> HttpResponse:
    context = {
        **_common(request),
        "page_data": {
            "api": {"pools": reverse("api:pool-list")},
            "run_url": reverse("dashboard:run", args=[0]),
        },
        "claim_ttl_s": CLAIM_TTL_S,
    }
    return render(request, "dashboard/pools.html", context)


@login_required
def run_new(request: HttpRequest) -> HttpResponse:
    if not is_operator(request.user):
        context = {**_common(request), "reason": "Creating runs needs the operator role."}
        return render(request, "dashboard/forbidden.html", context, status=403)
    examples = reads.examples()
    context = {
        **_common(request),
        "examples": examples,
        "engines": reads.registered_engines(),
        "page_data": {
            "examples": {e.name: {"toml": e.toml, "json": e.json} for e in examples},
            "default_example": reads.DEFAULT_EXAMPLE,
            "api": {"runs": reverse("api:run-list")},
            "run_url": reverse("dashboard:run", args=[0]),
        },
    }
    return render(request, "dashboard/run_new.html", context)


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = selectors.run_get(run_id)
    if run is None:
        raise Http404("no such run")
    operator = is_operator(request.user)
    lines = reads.kv_lines(run.config)
    low, high = selectors.run_cap_bounds(run)
    engines = reads.run_engines(run.config)
    page_data = {
        "run": run.pk,
        "operator": operator,
        "viewer_reason": "" if operator else VIEWER_REASON,
        "kv_lines": {"policy": lines.policy, "trim": lines.trim, "shed": lines.shed},
        "poll_interval_s": reads.poll_interval_s(run.config),
        "cap_bounds": [low, high],
        "engines": engines,
        "served": reads.served_versions(run, [e["engine_id"] for e in engines]),
        "relays_weights": reads.relays_weights(run.config),
        "engine_changes": reads.engine_changes(run),
        "kinds": [kind.value for kind in DecisionKind],
        "websocket": f"/ws/runs/{run.pk}/",
        "api": {
            "run": reverse("api:run-detail", args=[run.pk]),
            "decisions": reverse("api:run-decisions", args=[run.pk]),
            "samples": reverse("api:run-samples", args=[run.pk]),
            "steps": reverse("api:run-steps", args=[run.pk]),
            "override": reverse("api:run-override-create", args=[run.pk]),
            "overrides": reverse("api:run-overrides", args=[run.pk]),
            "stop": reverse("api:run-stop", args=[run.pk]),
            "pause": reverse("api:run-pause", args=[run.pk]),
            "resume": reverse("api:run-resume", args=[run.pk]),
            # An engine's removal is "<engines><name>/remove/".
            "engines": reverse("api:run-engines", args=[run.pk]),
            "share": reverse("api:run-share", args=[run.pk]),
            "pools": reverse("api:pool-list"),
        },
        "pools_page": reverse("dashboard:pools"),
        "signin": reverse("dashboard:signin"),
    }
    context = {
        **_common(request),
        "run": run,
        "observe": reads.observe_only(run.config),
        "lines": lines,
        "cap_bounds": (low, high),
        "registered": reads.registered_engines() if operator else [],
        "drain_s": {"default": f"{DEFAULT_DRAIN_S:g}", "max": f"{MAX_DRAIN_S:g}"},
        "share_terms": reads.share_terms(run.config),
        "share_range": SHARE_RANGE,
        "priority_range": PRIORITY_RANGE,
        "page_data": page_data,
    }
    return render(request, "dashboard/run_detail.html", context)


@login_required
def compare(request: HttpRequest) -> HttpResponse:
    """Two to four runs on one page: the API's checks of ``runs``, each refusal said on the
    page with the API's status; the series are read by the page's script from the API."""
    filters = CompareFilters(data=request.GET.dict())
    if not filters.is_valid():
        refusal = " ".join(str(m) for m in filters.errors.get("runs", ["is wrong"]))
        return _compare_refused(request, f"runs: {refusal}", 400)
    try:
        found = compare_runs(filters.validated_data["runs"])
    except NoSuchRuns as missing:
        return _compare_refused(request, str(missing), 404)
    runs = [
        {
            "run": run,
            "colour": index,
            "policy": selectors.policy_name(run.config),
            "max_steps": selectors.max_steps(run.config),
        }
        for index, run in enumerate(found.runs)
    ]
    differences = [
        {
            "path": d.path,
            "cells": [{"absent": v is ABSENT, "value": v} for v in d.values],
        }
        for d in found.differences
    ]
    page_data = {
        "runs": [
            {
                "id": run.pk,
                "name": run.name,
                "colour": index,
                "api": {
                    "run": reverse("api:run-detail", args=[run.pk]),
                    "decisions": reverse("api:run-decisions", args=[run.pk]),
                    "samples": reverse("api:run-samples", args=[run.pk]),
                    "steps": reverse("api:run-steps", args=[run.pk]),
                },
            }
            for index, run in enumerate(found.runs)
        ],
    }
    context = {
        **_common(request),
        "runs": runs,
        "differences": differences,
        "page_data": page_data,
    }
    return render(request, "dashboard/compare.html", context)


def _compare_refused(request: HttpRequest, refusal: str, status: int) -> HttpResponse:
    context = {**_common(request), "refusal": refusal}
    return render(request, "dashboard/compare.html", context, status=status)
