"""A run: one rollout-generation job, its config and where it stands."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from controlplane.runs.consumers import run_group_name


class RunStatus(models.TextChoices):
    PENDING = "pending", "Pending"  # stored, its worker task not yet started
    RUNNING = "running", "Running"  # a worker hosts its runtime
    STOPPED = "stopped", "Stopped"  # an operator stopped it
    FINISHED = "finished", "Finished"  # it produced every step it was asked for
    FAILED = "failed", "Failed"  # its runtime ended on an error


class Run(models.Model):
    name = models.CharField(max_length=200)
    config = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.PENDING)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="runs"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.name}, {self.status})"

    @property
    def group_name(self) -> str:
        """The Channels group that carries this run's live events."""
        return run_group_name(self.pk)
