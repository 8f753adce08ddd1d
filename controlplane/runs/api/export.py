"""Streaming a run's decisions or steps as CSV or JSON without holding them in memory.

Rows are read in keyset chunks (``selectors.export_chunks``): each chunk is one indexed query,
so a million rows cost a thousand small queries and one chunk of memory. Under ASGI (daphne)
the body must be an async iterator, or Django first drains a sync one into a list, which is
the very thing streaming is for avoiding; under WSGI (tests, a WSGI server) a sync one.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Iterable, Iterator
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse

from controlplane.runs import selectors

EXPORT_CHUNK_ROWS = 2000  # rows per query: about 1 MB of decisions, a few ms each
COLUMNS = {"decisions": selectors.DECISION_COLUMNS, "steps": selectors.STEP_COLUMNS}
RENAMED = {"run_id": "run", "override__id": "override"}
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json"}


def header(table: str) -> list[str]:
    return [RENAMED.get(name, name) for name in COLUMNS[table]]


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _record(table: str, row: dict[str, Any]) -> dict[str, Any]:
    return {RENAMED.get(k, k): _plain(row[k]) for k in COLUMNS[table]}


class Encoder:
    """The body's text in pieces: ``start()``, ``rows(chunk)`` per chunk, ``end()``."""

    def __init__(self, table: str, kind: str) -> None:
        self.table = table
        self.kind = kind
        self._first = True
        self._buffer = io.StringIO()
        self._csv = csv.writer(self._buffer)

    def start(self) -> str:
        return self._line(header(self.table)) if self.kind == "csv" else "["

    def rows(self, rows: list[dict[str, Any]]) -> str:
        columns = COLUMNS[self.table]
        if self.kind == "csv":
            return "".join(self._line(_csv_cell(row[k]) for k in columns) for row in rows)
        text = ",\n".join(json.dumps(_record(self.table, row)) for row in rows)
        lead = "\n" if self._first else ",\n"
        self._first = False
        return lead + text

    def end(self) -> str:
        return "" if self.kind == "csv" else "\n]\n"

    def _line(self, values: Iterable[Any]) -> str:
        self._csv.writerow(list(values))
        text = self._buffer.getvalue()
        self._buffer.seek(0)
        self._buffer.truncate()
        return text


def _csv_cell(value: Any) -> Any:
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    if value is None:
        return ""
    return _plain(value)


def _sync_body(table: str, kind: str, run_id: int) -> Iterator[bytes]:
    encoder = Encoder(table, kind)
    yield encoder.start().encode()
    for rows in selectors.export_chunks(table, run_id, EXPORT_CHUNK_ROWS):
        yield encoder.rows(rows).encode()
    yield encoder.end().encode()


async def _async_body(table: str, kind: str, run_id: int) -> AsyncIterator[bytes]:
    fetch = sync_to_async(selectors.export_chunk)
    encoder = Encoder(table, kind)
    yield encoder.start().encode()
    after = None
    while True:
        rows = await fetch(table, run_id, after, EXPORT_CHUNK_ROWS)
        if rows:
            yield encoder.rows(rows).encode()
        if len(rows) < EXPORT_CHUNK_ROWS:
            break
        after = selectors.chunk_key(table, rows[-1])
    yield encoder.end().encode()


def export_response(request: HttpRequest, table: str, kind: str, run_id: int) -> Any:
    if isinstance(request, ASGIRequest):
        body: Any = _async_body(table, kind, run_id)
    else:
        body = _sync_body(table, kind, run_id)
    response = StreamingHttpResponse(body, content_type=CONTENT_TYPES[kind])
    response["Content-Disposition"] = f'attachment; filename="run-{run_id}-{table}.{kind}"'
    return response
