"""The landing page: where the stack stands and which runs exist. For signed-in users only, as
the API and the websockets are: run names and configs are a team's business."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.health import check_database, check_redis
from controlplane.runs.models import Run

# The landing page lists the newest runs; the REST API pages through the rest.
RECENT_RUNS_SHOWN = 20


@login_required
def home(request: HttpRequest) -> HttpResponse:
    context = {
        "checks": {"database": check_database(), "redis": check_redis()},
        "runs": Run.objects.all()[:RECENT_RUNS_SHOWN],
    }
    return render(request, "dashboard/home.html", context)
