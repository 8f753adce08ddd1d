"""Cursor pagination: stable under the inserts a live run makes while a client pages, and
each page one index range scan whatever its depth (an offset would rescan every row before)."""

from __future__ import annotations

from django.conf import settings
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request


class Pages(CursorPagination):
    page_size_query_param = "page_size"

    def __init__(self) -> None:
        self.page_size = settings.PACER_PAGE_SIZE
        self.max_page_size = settings.PACER_MAX_PAGE_SIZE

    def get_page_size(self, request: Request) -> int:
        """The page size asked for; a 400 for one that is not a whole number in range (DRF
        would quietly use the default, and a client would think it got what it asked)."""
        asked = request.query_params.get(self.page_size_query_param)
        if asked is None:
            return self.page_size
        if not (asked.isascii() and asked.isdigit()) or not 1 <= int(asked) <= self.max_page_size:
            raise ValidationError(
                {"page_size": [f"must be a whole number from 1 to {self.max_page_size}"]}
            )
        return int(asked)

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
