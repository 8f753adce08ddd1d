"""The landing page: where the stack stands and which runs exist."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.health import check_database, check_redis
from controlplane.runs.models import Run

# The landing page lists the newest runs; the REST API pages through the rest.
RECENT_RUNS_SHOWN = 20


def home(request: HttpRequest) -> HttpResponse:
    context = {
        "checks": {"database": check_database(), "redis": check_redis()},
        "runs": Run.objects.all()[:RECENT_RUNS_SHOWN],
    }
    return render(request, "dashboard/home.html", context)
