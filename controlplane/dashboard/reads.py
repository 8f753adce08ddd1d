"""What the dashboard's pages read that the REST API does not hand over in one piece: a page
of runs with each one's recent caps (the list's sparklines), the KV lines a run's policy
trims and sheds at, the engines a run names and the version each serves by its newest
weights decision, and the example configs.

Every query here is bounded: the runs list costs one query for the page (each run's latest
reward a subquery in it, one row of the ``(run, step)`` unique index read backwards) and one
index range scan per run shown (``decision_run_at``, read backwards), whatever the runs' ages.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db.models import OuterRef, Subquery

from controlplane.alerts.models import AlertEpisode, AlertRule, Delivery
from controlplane.runs.models import Decision, Engine, Run, StepRecord
from controlplane.runs.selectors import max_steps, policy_name
from workers.core.config.fields import ConfigError
from workers.core.config.run import parse_run_config
from workers.core.controller.policies.pacer import PacerConfig
from workers.core.controller.policies.reference import ReferenceConfig
from workers.core.decisions import DecisionKind

RUNS_PER_PAGE = 25
# A sparkline shows the shape of the last few dozen cap changes, not a run's whole history.
SPARKLINE_DECISIONS = 60
EXAMPLES_DIR = Path(settings.BASE_DIR) / "configs"
DEFAULT_EXAMPLE = "multiturn"


@dataclass(frozen=True, slots=True)
class RunRow:
    run: Run
    max_steps: int | None
    sparkline: list[list[float]]  # [[unix seconds, cap], ...], oldest first


def runs_page(number: str | int | None) -> tuple[Page, list[RunRow]]:
    """One page of runs, newest first, each with its cap sparkline and, as
    ``latest_reward``, the mean reward of its newest step (None before its first)."""
    newest_step = StepRecord.objects.filter(run=OuterRef("pk")).order_by("-step")
    runs = Run.objects.only(
        "id",
        "name",
        "state",
        "step",
        "cap",
        "policy_cap",
        "inflight_train",
        "inflight_eval",
        "generation_tokens_per_s",
        "created_at",
        "finished_at",
        "config",
    ).annotate(latest_reward=Subquery(newest_step.values("reward_mean")[:1]))
    runs = runs.order_by("-created_at", "-id")
    page = Paginator(runs, RUNS_PER_PAGE).get_page(number)
    rows = [RunRow(run, max_steps(run.config), cap_sparkline(run)) for run in page.object_list]
    return page, rows


def cap_sparkline(run: Run) -> list[list[float]]:
    """The cap after each of the run's last decisions, and its cap now (or when it ended)."""
    recent = list(
        Decision.objects.filter(run_id=run.pk)
        .order_by("-at", "-id")
        .values_list("at", "cap_after")[:SPARKLINE_DECISIONS]
    )
    points = [[at.timestamp(), float(cap)] for at, cap in reversed(recent)]
    if points and run.cap is not None:
        end = run.finished_at.timestamp() if run.finished_at else None
        if end is not None and end > points[-1][0]:
            points.append([end, float(run.cap)])
    return points


@dataclass(frozen=True, slots=True)
class KvLines:
    """Where the run's policy trims the cap and where it also sheds episodes."""

    policy: str
    trim: float
    shed: float


def kv_lines(config: Any) -> KvLines:
    """From the run's config, or the policy's defaults where the config does not parse (a
    config stored by an older schema): the lines the KV chart draws bands at. ``fixed``
    reads the reference policy's signals, so it draws the reference's lines."""
    try:
        concurrency = parse_run_config(config).concurrency
    except ConfigError:
        policy = policy_name(config)
        lines = PacerConfig() if policy == "pacer" else ReferenceConfig()
        return KvLines(policy, lines.trim_kv_usage, lines.shed_kv_usage)
    chosen = concurrency.pacer if concurrency.policy == "pacer" else concurrency.reference
    return KvLines(concurrency.policy, chosen.trim_kv_usage, chosen.shed_kv_usage)


def observe_only(config: Any) -> bool:
    concurrency = config.get("concurrency") if isinstance(config, dict) else None
    return isinstance(concurrency, dict) and concurrency.get("observe") is True


def poll_interval_s(config: Any) -> float:
    try:
        return parse_run_config(config).concurrency.poll_interval_s
    except ConfigError:
        return 5.0


def share_terms(config: Any) -> tuple[float, int]:
    """The run's share and priority among the runs sharing its engines, as its config sets
    them (the defaults when it cannot be read)."""
    try:
        concurrency = parse_run_config(config).concurrency
    except ConfigError:
        return 1.0, 0
    return concurrency.share, concurrency.priority


def run_engines(config: Any) -> list[dict[str, Any]]:
    """The engines a run names, under the id its samples carry (the registered name, or
    ``host:port`` for one given by URL), with the role and ``max_num_seqs`` it runs with."""
    listed = config.get("engine") if isinstance(config, dict) else None
    entries = [e for e in listed if isinstance(e, dict)] if isinstance(listed, list) else []
    names = [e["name"] for e in entries if isinstance(e.get("name"), str)]
    registry = {e.name: e for e in Engine.objects.filter(name__in=names)}
    engines = []
    for entry in entries:
        name, url = entry.get("name"), entry.get("url")
        row = registry.get(name) if isinstance(name, str) else None
        if isinstance(name, str):
            engine_id = name
        elif isinstance(url, str):
            engine_id = urlsplit(url).netloc or url
        else:
            continue
        engines.append(
            {
                "engine_id": engine_id,
                "url": row.url if row else url,
                "role": entry.get("role") or (row.role if row else "unified"),
                "max_num_seqs": entry.get("max_num_seqs") or (row.max_num_seqs if row else None),
            }
        )
    return engines


def relays_weights(config: Any) -> bool:
    """Whether the run's trainer sends weights back, so its engines start on base weights
    and move to each acknowledged version."""
    trainer = config.get("trainer") if isinstance(config, dict) else None
    return isinstance(trainer, dict) and trainer.get("mode") == "external"


def served_versions(run: Run, engine_ids: list[str]) -> dict[str, dict[str, Any]]:
    """For each engine, its newest ``weights`` decision: the version it serves since (kept,
    when the update failed), when, and why; engines never updated are left out. One query
    per engine, reading the run's weights decisions newest first on the ``(run, kind, at)``
    index until one is the engine's: the first few rows for an engine updated with the
    others, every weights row of the run for one never updated (a few per step)."""
    versions = {}
    for engine_id in engine_ids:
        newest = (
            Decision.objects.filter(
                run_id=run.pk, kind=DecisionKind.WEIGHTS.value, engine=engine_id
            )
            .order_by("-at", "-id")
            .values("id", "at", "figures", "reason", "alert")
            .first()
        )
        version = newest["figures"].get("version") if newest else None
        if isinstance(version, int | float):
            versions[engine_id] = {
                "id": newest["id"],
                "at": newest["at"].isoformat(),
                "version": int(version),
                "reason": newest["reason"],
                "alert": newest["alert"],
            }
    return versions


# Engines joining and leaving a run: the decisions that say which ones drain or have left.
MEMBERSHIP_KINDS = (
    DecisionKind.ENGINE_JOIN.value,
    DecisionKind.ENGINE_DRAIN.value,
    DecisionKind.ENGINE_LEAVE.value,
)
MEMBERSHIP_DECISIONS = 200  # an operator's additions and removals: a few per run


def engine_changes(run: Run) -> dict[str, dict[str, Any]]:
    """For each engine added to or taken out of the run, its newest join, drain or leave
    decision (kind, when, why, figures): what the engine table marks "draining" or "left"
    from the page's first paint, whatever the age of the drain. One query on the
    ``(run, kind, at)`` index, the run's newest MEMBERSHIP_DECISIONS of these kinds."""
    newest: dict[str, dict[str, Any]] = {}
    rows = (
        Decision.objects.filter(run_id=run.pk, kind__in=MEMBERSHIP_KINDS)
        .exclude(engine="")
        .order_by("-at", "-id")
        .values("id", "at", "kind", "engine", "reason", "figures")[:MEMBERSHIP_DECISIONS]
    )
    for row in rows:
        if row["engine"] not in newest:
            newest[row["engine"]] = {**row, "at": row["at"].isoformat()}
    return newest


@dataclass(frozen=True, slots=True)
class Example:
    name: str
    toml: str
    json: str


def examples() -> list[Example]:
    """Every shipped example config, as written (TOML) and as the same document in JSON."""
    found = []
    for path in sorted(EXAMPLES_DIR.glob("*.toml")):
        text = path.read_text()
        found.append(Example(path.stem, text, json.dumps(tomllib.loads(text), indent=2)))
    return found


def registered_engines() -> list[Engine]:
    return list(Engine.objects.order_by("name"))


ALERTS_SHOWN = 50  # open episodes and deliveries on the Alerts page: the newest ones


def alerts_page() -> dict[str, Any]:
    """The rules, the conditions holding now, and the newest deliveries."""
    return {
        "rules": list(AlertRule.objects.all()),
        "open_episodes": list(
            AlertEpisode.objects.filter(resolved_at__isnull=True).select_related("rule")[
                :ALERTS_SHOWN
            ]
        ),
        "deliveries": list(Delivery.objects.select_related("episode__rule")[:ALERTS_SHOWN]),
    }
