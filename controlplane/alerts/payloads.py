"""What a notification says: a generic JSON document for programs, or Slack's incoming-webhook
body (``{"text": ...}``, which Mattermost, Rocket.Chat and Discord's Slack route take too)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import reverse

from controlplane.alerts.models import AlertEpisode, AlertRule, BodyFormat, DeliveryEvent


def run_link(run_id: int) -> str:
    return settings.PACER_PUBLIC_URL.rstrip("/") + reverse("dashboard:run", args=[run_id])


def body(rule: AlertRule, episode: AlertEpisode, event: DeliveryEvent, at: datetime) -> Any:
    link = run_link(episode.run_id)
    if rule.body_format == BodyFormat.SLACK:
        word = "FIRING" if event == DeliveryEvent.FIRED else "RESOLVED"
        return {"text": f"[{word}] {episode.summary} <{link}|run {episode.run_id}>"}
    return {
        "event": event.value,
        "kind": episode.kind,
        "summary": episode.summary,
        "run": {"id": episode.run_id, "name": episode.run.name, "url": link},
        "engines": episode.engines,
        "figures": episode.figures,
        "episode": episode.pk,
        "opened_at": episode.opened_at.isoformat(),
        "at": at.isoformat(),
        "rule": {"id": rule.pk, "name": rule.name},
    }
