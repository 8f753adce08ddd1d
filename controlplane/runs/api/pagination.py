"""Cursor pagination: stable under the inserts a live run makes while a client pages, and
each page one index range scan whatever its depth (an offset would rescan every row before).

A cursor is base64 text a client can write by hand, and DRF hands its position to the
database as it is: a position that is no value of the ordering's column (``p=abc`` for a
time, a number past 64 bits, a time past year 9999 in UTC) is a cursor that points nowhere,
a 404 like any cursor that does not decode, never a database error.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as FieldValueError
from django.db import models
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

from controlplane.runs.api.inputs import MAX_ROW_ID


class Pages(CursorPagination):
    page_size_query_param = "page_size"

    def __init__(self) -> None:
        self.page_size = settings.PACER_PAGE_SIZE
        self.max_page_size = settings.PACER_MAX_PAGE_SIZE
        self._position_field: models.Field | None = None

    def get_page_size(self, request: Request) -> int:
        """The page size asked for; a 400 for one that is not a whole number in range (DRF
        would quietly use the default, and a client would think it got what it asked)."""
        asked = request.query_params.get(self.page_size_query_param)
        if asked is None:
            return self.page_size
        whole = asked.isascii() and asked.isdigit() and len(asked) <= len(str(self.max_page_size))
        if not whole or not 1 <= int(asked) <= self.max_page_size:
            raise ValidationError(
                {"page_size": [f"must be a whole number from 1 to {self.max_page_size}"]}
            )
        return int(asked)

    def paginate_queryset(
        self, queryset: models.QuerySet, request: Request, view: Any = None
    ) -> list[Any] | None:
        first = self.ordering[0] if isinstance(self.ordering, tuple | list) else self.ordering
        self._position_field = queryset.model._meta.get_field(first.lstrip("-"))
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request: Request) -> Cursor | None:
        cursor = super().decode_cursor(request)
        if cursor is None or cursor.position is None or self._position_field is None:
            return cursor
        if not storable_position(self._position_field, cursor.position):
            raise NotFound(self.invalid_cursor_message)
        return cursor


def storable_position(field: models.Field, position: str) -> bool:
    """Whether ``position`` is a value the database can compare ``field`` with."""
    try:
        value = field.to_python(position)
    except FieldValueError:
        return False
    if isinstance(field, models.DateTimeField):
        try:
            (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
        except OverflowError:
            return False
        return True
    if isinstance(value, int):
        return -MAX_ROW_ID - 1 <= value <= MAX_ROW_ID
    if isinstance(value, str):
        return "\x00" not in value
    return True

    def get_schema_operation_parameters(self, view: object) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update(minimum=1, maximum=self.max_page_size)
        return parameters


class NewestFirst(Pages):
    ordering = ("-created_at", "-id")


class OldestFirst(Pages):
    """Decisions: oldest first, newest last, as a log reads."""

    ordering = ("at", "id")


class ByStep(Pages):
    ordering = ("step",)


class ByWave(Pages):
    ordering = ("wave",)


class ByCreation(Pages):
    ordering = ("created_at", "id")


class ByName(Pages):
    ordering = ("name",)
