"""The Content-Security-Policy header on every page (``PACER_CONTENT_SECURITY_POLICY``).

Pacer's pages run only scripts from its own static files and hand their data over in
``json_script`` blocks, so the policy allows no inline script or style: text an attacker
gets into a page (a run's name, a reason) cannot run there, however it got in.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if HEADER not in response:
            response[HEADER] = settings.PACER_CONTENT_SECURITY_POLICY
        return response
