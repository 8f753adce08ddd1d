"""Binning times in SQL, on PostgreSQL (production, tests) and SQLite (the quick start).

``EpochBin(at, step)`` is ``floor(epoch seconds of at / step)``: samples with the same value
share a bin, which starts at ``value * step`` seconds after the epoch. Grouping by it lets the
database reduce a week of polls to a page of points in one indexed scan.
"""

from __future__ import annotations

from typing import Any

from django.db.models import BigIntegerField, F, Func


class EpochBin(Func):
    output_field = BigIntegerField()

    def __init__(self, field: str, step_s: float) -> None:
        if not step_s > 0:
            raise ValueError(f"step_s must be > 0, got {step_s}")
        super().__init__(F(field))
        self.step_s = float(step_s)

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        at_sql, at_params = compiler.compile(self.source_expressions[0])
        if connection.vendor == "postgresql":
            sql = f"CAST(FLOOR(EXTRACT(EPOCH FROM {at_sql}) / %s) AS BIGINT)"
        elif connection.vendor == "sqlite":
            # julianday counts days from noon of 4714 BC; 2440587.5 of them is 1970-01-01.
            # CAST truncates, which is floor for times after 1970 (SQLite may lack FLOOR).
            sql = f"CAST((julianday({at_sql}) - 2440587.5) * 86400.0 / %s AS INTEGER)"
        else:
            raise NotImplementedError(f"EpochBin has no SQL for {connection.vendor}")
        return sql, [*at_params, self.step_s]
