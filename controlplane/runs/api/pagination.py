"""Cursor pagination: stable under the inserts a live run makes while a client pages, and
each page one index range scan whatever its depth (an offset would rescan every row before)."""

from __future__ import annotations

from django.conf import settings
from rest_framework.pagination import CursorPagination


class Pages(CursorPagination):
    page_size_query_param = "page_size"

    def __init__(self) -> None:
        self.page_size = settings.PACER_PAGE_SIZE
        self.max_page_size = settings.PACER_MAX_PAGE_SIZE


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
