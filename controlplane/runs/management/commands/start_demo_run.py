"""Start the demo run of the quick start, unless one is already going."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.runs.models import Run, RunState
from controlplane.runs.services import run_create
from workers.core.config.fields import ConfigError
from workers.run import read_config

DEMO_CONFIG = Path(settings.BASE_DIR) / "configs" / "demo.toml"


class Command(BaseCommand):
    help = "Create the demo run (configs/demo.toml) on the registered simulated engines."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", type=Path, default=DEMO_CONFIG)

    def handle(self, *args: Any, config: Path, **options: Any) -> None:
        try:
            document = read_config(config).document
        except ConfigError as refused:
            raise CommandError(f"{config}: {refused}") from None
        active = Run.objects.filter(
            name=document["name"], state__in=(RunState.QUEUED, RunState.RUNNING)
        ).first()
        if active is not None:
            self.stdout.write(f"demo run {active.pk} is {active.state} already")
            run = active
        else:
            owner = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
            try:
                run = run_create(document=document, created_by=owner)
            except ConfigError as refused:
                raise CommandError(f"{config}: {refused}") from None
            self.stdout.write(f"demo run {run.pk} queued ({document['name']})")
        folder = run.output_dir or str(Path(settings.PACER_RUNS_DIR) / str(run.pk))
        self.stdout.write(f"demo batches: {folder}/steps/")
