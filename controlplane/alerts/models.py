"""Alert rules (who is told of what, where), the episodes of each condition, and every
delivery of a notification with its answer.

An episode opens when a rule's condition starts to hold for a run and closes when it stops:
one notification each way. At most one open episode per rule, run, kind and key (the
engine, or nothing) is a constraint of the database, so any number of watchers (one per
alerts worker) can look at once and only one opens it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from controlplane.alerts.conditions import AlertKind, Thresholds

DEFAULTS = Thresholds()
KIND_CHOICES = [(kind.value, kind.value) for kind in AlertKind]


def check_webhook_url(url: str) -> None:
    """http(s) with a host, no user info. Not Django's URLValidator: it refuses a host name of
    one label, which is what a receiver on a compose or Kubernetes network is called."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018  (reading it checks it)
    except ValueError:
        raise ValidationError("its port is not a number from 0 to 65535") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError("must be an http or https URL with a host")
    if parts.username or parts.password:
        raise ValidationError("must not carry user info; put a token in the path")


def every_kind() -> list[str]:
    return [kind.value for kind in AlertKind]


class BodyFormat(models.TextChoices):
    JSON = "json", "Generic JSON"
    SLACK = "slack", "Slack-compatible ({'text': ...})"


class AlertRule(models.Model):
    name = models.CharField(max_length=200)
    url = models.CharField(
        max_length=1000, validators=[check_webhook_url], help_text="where notifications are POSTed"
    )
    body_format = models.CharField(max_length=8, choices=BodyFormat.choices, default="json")
    # Null: every run of the deployment; else this run only.
    run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="alert_rules"
    )
    kinds = models.JSONField(default=every_kind, help_text="the conditions it fires on")
    enabled = models.BooleanField(default=True)
    storm_preemptions_per_s = models.FloatField(
        default=DEFAULTS.storm_preemptions_per_s, validators=[MinValueValidator(0.0)]
    )
    storm_polls = models.PositiveIntegerField(
        default=DEFAULTS.storm_polls, validators=[MinValueValidator(1)]
    )
    engine_down_s = models.FloatField(
        default=DEFAULTS.engine_down_s, validators=[MinValueValidator(0.0)]
    )
    pin_expiring_s = models.FloatField(
        default=DEFAULTS.pin_expiring_s, validators=[MinValueValidator(0.0)]
    )
    idle_s = models.FloatField(default=DEFAULTS.idle_s, validators=[MinValueValidator(1.0)])
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"alert rule {self.pk} ({self.name})"

    @property
    def thresholds(self) -> Thresholds:
        return Thresholds(
            storm_preemptions_per_s=self.storm_preemptions_per_s,
            storm_polls=self.storm_polls,
            engine_down_s=self.engine_down_s,
            pin_expiring_s=self.pin_expiring_s,
            idle_s=self.idle_s,
        )


class AlertEpisode(models.Model):
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="episodes")
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="alert_episodes")
    kind = models.CharField(max_length=32, choices=KIND_CHOICES)
    key = models.CharField(max_length=200, blank=True, default="")
    summary = models.TextField()
    engines = models.JSONField(default=list)
    figures = models.JSONField(default=dict)
    opened_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "run", "kind", "key"],
                condition=models.Q(resolved_at__isnull=True),
                name="one_open_episode",
            )
        ]
        indexes = [models.Index(fields=["resolved_at", "rule"], name="episode_open_rule")]


class DeliveryEvent(models.TextChoices):
    FIRED = "fired", "Fired"
    RESOLVED = "resolved", "Resolved"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"  # not answered with a success yet; retried with backoff
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"  # every attempt failed


class Delivery(models.Model):
    """One notification to one rule's URL: who was told what, when, and what they answered."""

    episode = models.ForeignKey(AlertEpisode, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=16, choices=DeliveryEvent.choices)
    url = models.CharField(max_length=1000)
    body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    state = models.CharField(max_length=16, choices=DeliveryState.choices, default="pending")
    attempts = models.PositiveIntegerField(default=0)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    status_code = models.PositiveIntegerField(null=True, blank=True)  # the last answer's
    answer = models.TextField(blank=True, default="")  # its status line, or the error
    delivered_at = models.DateTimeField(null=True, blank=True)
    # When the next attempt is due (the watch sends it then, and moves this on by a claim's
    # length so that no other watcher sends it too; the attempt sets it by the backoff).
    next_attempt_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "next_attempt_at"], name="delivery_due")]
