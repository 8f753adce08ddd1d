"""Register an engine by name (or update it), so run configs can name it."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.runs.models import EngineRoleChoice
from controlplane.runs.services import engine_register


class Command(BaseCommand):
    help = "Register an inference engine under a name that run configs can use."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("url", help="e.g. http://127.0.0.1:8100 (without /v1)")
        parser.add_argument("--role", choices=EngineRoleChoice.values, default="unified")
        parser.add_argument("--max-num-seqs", type=int, default=None)

    def handle(
        self, *args: Any, name: str, url: str, role: str, max_num_seqs: int | None, **options: Any
    ) -> None:
        try:
            engine = engine_register(name=name, url=url, role=role, max_num_seqs=max_num_seqs)
        except ValidationError as refused:
            raise CommandError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in refused.message_dict.items())
            ) from None
        self.stdout.write(f"engine {engine.name}: {engine.url} ({engine.role})")
