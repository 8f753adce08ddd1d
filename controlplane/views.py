"""The site's error pages: JSON under /api/, as every API error is; Django's own elsewhere.
(The dashboard's pages are in ``controlplane.dashboard``.)"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found
from django.views.defaults import server_error as django_server_error


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's 404 for a URL no route matches: JSON under /api/, as every API error is."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "not found"}, status=404)
    return page_not_found(request, exception or Http404())


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "internal error; the server log has it"}, status=500)
    return django_server_error(request)
