"""Passwords the management commands set, held to the same rules as the admin's forms."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError


def checked_password(password: str, user: AbstractBaseUser) -> str:
    """``password`` if it keeps to AUTH_PASSWORD_VALIDATORS for ``user``; CommandError saying
    every rule it breaks otherwise."""
    try:
        validate_password(password, user)
    except ValidationError as refused:
        raise CommandError("the password is refused: " + " ".join(refused.messages)) from None
    return password
