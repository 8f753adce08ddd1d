"""Every log line carries the run it belongs to, also from tasks spawned inside the run."""

from __future__ import annotations

import asyncio
import logging

import pytest

from workers.logcontext import RunContextFilter, run_context


def format_line(record: logging.LogRecord) -> str:
    RunContextFilter().filter(record)
    return logging.Formatter("%(levelname)s run=%(run_id)s %(message)s").format(record)


def make_record(message: str) -> logging.LogRecord:
    return logging.LogRecord("pacer", logging.INFO, __file__, 1, message, None, None)


def test_line_outside_a_run_says_dash() -> None:
    assert format_line(make_record("started")) == "INFO run=- started"


async def test_tasks_spawned_in_a_run_inherit_its_id() -> None:
    async def child() -> str:
        await asyncio.sleep(0)
        return format_line(make_record("cap 8 -> 10"))

    with run_context(17):
        line = await asyncio.create_task(child())
    assert line == "INFO run=17 cap 8 -> 10"
    assert format_line(make_record("after")) == "INFO run=- after"


def test_context_is_restored_after_an_error() -> None:
    with pytest.raises(RuntimeError), run_context("a"):
        raise RuntimeError("boom")
    assert format_line(make_record("x")) == "INFO run=- x"
