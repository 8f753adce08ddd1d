"""The API's own error types (imported by parsers, which DRF loads early: no views here)."""

from __future__ import annotations

from django.conf import settings
from rest_framework import exceptions, status


def too_large_text() -> str:
    return f"the body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"

    def __init__(self) -> None:
        super().__init__(too_large_text())


class Conflict(exceptions.APIException):
    """The request is well formed but the run's state does not allow it."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class IdempotencyKeyReused(exceptions.APIException):
    """A create's Idempotency-Key was used before with another body."""

    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"


class NamedNotFound(exceptions.NotFound):
    """A 404 whose sentence says what is missing (``no such run: 7``), which the handler
    keeps, unlike the generic ``not found`` it answers for any other."""
