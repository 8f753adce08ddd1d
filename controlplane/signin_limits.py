"""Sign-in attempts, limited per user name and per address, on every sign-in form (the
dashboard's and the admin's): ``PACER_SIGNIN_FAILURES_PER_USER`` and ``..._PER_ADDRESS``.

Each attempt takes a hit in both windows before the password is checked (atomically, so
attempts at once cannot slip past the limit), and gives both back when the password was
right: what stays counted are failures. Over either limit the form refuses without checking
the password at all, so guessing on does not tell a right password from a wrong one. The
address is the one the server saw (behind a proxy, daphne's ``--proxy-headers`` make it the
client's).
"""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from controlplane import rate_limits


class ThrottledSignIn(AuthenticationForm):
    """A sign-in form whose attempts are counted; ``retry_after_s`` is set once refused."""

    retry_after_s: int | None = None

    def clean(self) -> dict[str, Any]:
        username = (self.cleaned_data.get("username") or "").strip().lower()
        address = self.request.META.get("REMOTE_ADDR", "") if self.request else ""
        admissions = [
            rate_limits.acquire(
                f"signin:user:{username}",
                *rate_limits.parse_rate(settings.PACER_SIGNIN_FAILURES_PER_USER),
            ),
            rate_limits.acquire(
                f"signin:address:{address}",
                *rate_limits.parse_rate(settings.PACER_SIGNIN_FAILURES_PER_ADDRESS),
            ),
        ]
        refused = [admission for admission in admissions if not admission.allowed]
        if refused:
            for admission in admissions:
                rate_limits.release(admission)  # an attempt not made is no failure
            self.retry_after_s = math.ceil(max(admission.wait_s for admission in refused))
            minutes = math.ceil(self.retry_after_s / 60)
            raise forms.ValidationError(
                "Too many failed sign-ins for this user name or from this address: "
                f"try again in {minutes} minute{'s' if minutes != 1 else ''}.",
                code="throttled",
            )
        cleaned = super().clean()  # ValidationError for a wrong password: the hits stay
        for admission in admissions:
            rate_limits.release(admission)
        return cleaned


class AdminThrottledSignIn(ThrottledSignIn, AdminAuthenticationForm):
    """The admin's sign-in form (staff accounts only), counted with the dashboard's."""
