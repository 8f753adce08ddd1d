"""Compact engine samples into rollups and apply raw-sample retention now, for every run or
some: what each worker's sweep does a little at a time, at once (after an upgrade, or to
catch up a backlog)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from controlplane.runs import rollups


class Command(BaseCommand):
    help = "Roll engine samples up into 60 s, 10 min, 1 h bins; delete raw ones past retention."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_ids", nargs="*", type=int, help="default: every run with samples")

    def handle(self, *args: Any, run_ids: list[int], **options: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError(
                f"sample rollups need PostgreSQL (this database is {connection.vendor}); "
                "on it the samples endpoint reads raw samples, and nothing needs compacting"
            )
        began = time.monotonic()
        ids = run_ids or rollups.compactable_runs()
        self.stdout.write(f"compacting {len(ids)} run(s)")
        for index, run_id in enumerate(ids, 1):
            started = time.monotonic()
            report = rollups.compact_run(run_id, progress=self._chunk)
            rows = ", ".join(f"{tier} s: {count:,}" for tier, count in report.rows.items())
            marks = ", ".join(
                f"{tier} s: {until.isoformat() if until else '-'}"
                for tier, until in report.until.items()
            )
            self.stdout.write(
                f"[{index}/{len(ids)}] run {run_id}: rollup rows {rows}; "
                f"raw samples deleted {report.deleted:,}; rolled up to {marks}; "
                f"{time.monotonic() - started:.1f} s"
                + ("" if report.caught_up else " (another worker holds it: not caught up)")
            )
        self.stdout.write(f"done in {time.monotonic() - began:.1f} s")

    def _chunk(self, run_id: int, tier_s: int, until: datetime, rows: int) -> None:
        self.stdout.write(f"  run {run_id}, {tier_s} s bins: {rows:,} rows, to {until.isoformat()}")
