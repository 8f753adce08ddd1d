"""The landing page: where the stack stands and which runs exist. For signed-in users only, as
the API and the websockets are: run names and configs are a team's business."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.defaults import page_not_found
from django.views.defaults import server_error as django_server_error

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


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's 404 for a URL no route matches: JSON under /api/, as every API error is."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "not found"}, status=404)
    return page_not_found(request, exception or Http404())


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "internal error; the server log has it"}, status=500)
    return django_server_error(request)
