"""One log line per event, each carrying the run it belongs to.

The run id sits in a context variable, so asyncio tasks spawned inside a run inherit it and
code deep in the core logs with the right run without passing it around.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar

current_run_id: ContextVar[str] = ContextVar("pacer_run_id", default="-")


@contextlib.contextmanager
def run_context(run_id: object) -> Iterator[None]:
    token = current_run_id.set(str(run_id))
    try:
        yield
    finally:
        current_run_id.reset(token)


class RunContextFilter(logging.Filter):
    """Stamps every record with the current run id (``-`` outside a run)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.run_id = current_run_id.get()
        return True
