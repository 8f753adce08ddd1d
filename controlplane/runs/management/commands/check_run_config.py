"""Check run configs without starting anything: the same checks the REST API runs.

With ``--no-engines`` it needs no engine up and, for configs that give engines by URL, no
database either: it reads the database only to look up engines given by a registered name,
and where that registry is not there yet (a fresh checkout), it says so in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from controlplane.runs.services import run_config_check
from workers.core.config.fields import ConfigError
from workers.run import read_config


class Command(BaseCommand):
    help = (
        "Check run configs (TOML or JSON): 'ok' for each valid file, its field errors "
        "otherwise; exits non-zero when any is refused."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", type=Path)
        parser.add_argument(
            "--no-engines",
            action="store_true",
            help="skip asking the engines whether they answer and serve the model",
        )

    def handle(self, *args: Any, files: list[Path], no_engines: bool, **options: Any) -> None:
        refused = 0
        for path in files:
            try:
                config = read_config(path)
                run_config_check(config.document, check_engines=not no_engines)
            except DatabaseError as missing:  # the registry of engine names, looked up
                raise CommandError(
                    f"{path} names registered engines, and there is no engine registry here "
                    f"({missing}): run ./scripts/run once first (it makes the database and "
                    "registers sim-engine-0 and -1), or python manage.py migrate and "
                    "register_engine NAME URL"
                ) from None
            except ConfigError as error:
                refused += 1
                self.stdout.write(f"{path}: refused")
                for field_error in error.errors:
                    self.stdout.write(f"  {field_error}")
                continue
            self.stdout.write(f"{path}: ok")
        if refused:
            raise CommandError(f"{refused} of {len(files)} configs refused")
