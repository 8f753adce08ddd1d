"""A URLconf with one view that fails, for the tests of what an error page may show."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import path


def fails(request: HttpRequest) -> HttpResponse:
    broker = settings.CELERY_BROKER_URL  # a local the debug page lists with the frame
    raise RuntimeError(f"the broker went away ({broker.rsplit('@', 1)[-1]})")


urlpatterns = [path("fails/", fails)]
