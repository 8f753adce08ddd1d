"""Adding an engine to a run and taking one out, and changing its share of shared engines:
the run's config changed and the command stored.

The stored config is the run's engine list from the moment an operator changes it: a worker
that takes the run up later (a restart, a resume) starts with the new list, and the command
(an override) tells the worker hosting it now to act on the change live: route to a joining
engine, drain a leaving one. A run without a worker has nothing to act: its command is
settled at once. Before anything is written, a joining engine must pass the checks a run's
engines pass at creation (registered name or URL, the deployment's engine hosts) and serve
the run's model.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from typing import Any

import httpx
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from controlplane.runs.control import publish_control
from controlplane.runs.models import Engine, Override, OverrideMode, Run, RunState
from controlplane.runs.services import CommandRefused, InvalidCommand, run_config_resolve
from inference.metrics.endpoints import EngineSpec
from workers.core.config.fields import ConfigError
from workers.core.config.run import RunConfig
from workers.core.members import DEFAULT_DRAIN_S, MAX_DRAIN_S
from workers.core.sharing import PRIORITY_RANGE, SHARE_RANGE
from workers.runtime.engines import engine_specs, preflight

HOSTED = (RunState.RUNNING, RunState.STOPPING)


def run_engines(run: Run) -> list[dict[str, str]]:
    """The run's engines as its worker names them (registered name, or host:port), with
    their URLs. CommandRefused when the stored config no longer passes its checks (a
    registered engine it names was deleted since, say)."""
    try:
        config, names = run_config_resolve(run.config)
    except ConfigError as broken:
        why = f"run {run.pk}'s stored config does not pass its checks: {broken}"
        raise CommandRefused(why) from None
    return [{"name": s.name, "url": s.base_url} for s in engine_specs(config.engines, names)]


def engine_add(
    *, run: Run, created_by: AbstractBaseUser | None, engine: str, reason: str = ""
) -> Override:
    """``engine`` (a registered engine's name, or a URL) joins ``run``'s pool."""
    entry = _entry(engine)
    document = copy.deepcopy(run.config)
    document["engine"] = [*document.get("engine", []), entry]
    try:
        config, names = run_config_resolve(document)
    except ConfigError as refused:
        raise InvalidCommand(
            _engine_errors(refused, len(document["engine"]) - 1), "engine"
        ) from None
    specs = engine_specs(config.engines, names)
    joining, present = specs[-1], specs[:-1]
    same = [s.name for s in present if joining.name == s.name or joining.base_url == s.base_url]
    if same:
        raise CommandRefused(f"engine {joining.name} is in run {run.pk} already (as {same[0]})")
    model = run.model_name or config.model
    try:
        asyncio.run(_serves(config, joining, model))
    except ConfigError as refused:
        raise InvalidCommand("; ".join(e.message for e in refused.errors), "engine") from None
    return _store(run, created_by, OverrideMode.ENGINE_ADD, joining.name, document, reason)


def engine_remove(
    *,
    run: Run,
    created_by: AbstractBaseUser | None,
    engine: str,
    drain_s: float | None = None,
    reason: str = "",
) -> Override:
    """``engine`` (as the run names it) leaves ``run``'s pool: it drains for up to
    ``drain_s`` (default ``DEFAULT_DRAIN_S``), then what is still on it is cancelled."""
    seconds = DEFAULT_DRAIN_S if drain_s is None else drain_s
    if not 0 <= seconds <= MAX_DRAIN_S:
        raise InvalidCommand(f"drain_s must be in [0, {MAX_DRAIN_S:g}] seconds", "drain_s")
    names = [row["name"] for row in run_engines(run)]
    if engine not in names:
        raise CommandRefused(f"engine {engine} is not in run {run.pk} ({', '.join(names)})")
    if len(names) == 1:
        raise CommandRefused(f"engine {engine} is run {run.pk}'s last: a run needs one engine")
    document = copy.deepcopy(run.config)
    document["engine"] = [e for e, n in zip(document["engine"], names, strict=True) if n != engine]
    return _store(
        run, created_by, OverrideMode.ENGINE_REMOVE, engine, document, reason, drain_s=seconds
    )


def _store(
    run: Run,
    created_by: AbstractBaseUser | None,
    mode: str,
    engine: str,
    document: dict[str, Any],
    reason: str,
    drain_s: float | None = None,
) -> Override:
    """The config and the command in one transaction, with the run locked: a second command
    sent meanwhile sees this one's engine list, and is checked again against it."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.is_ended:
            raise CommandRefused(
                f"run {locked.pk} has ended ({locked.state}); it takes no commands"
            )
        if locked.config.get("engine") != run.config.get("engine"):
            raise CommandRefused(
                f"run {locked.pk}'s engines changed meanwhile: look again and resend"
            )
        locked.config = document
        locked.save(update_fields=["config", "updated_at"])
        override = Override.objects.create(
            run=locked,
            created_by=created_by,
            mode=mode,
            engine=engine,
            drain_s=drain_s,
            reason=reason,
        )
        _announce(locked, override)
    run.refresh_from_db()
    return override


def _entry(engine: str) -> dict[str, str]:
    text = engine.strip()
    if not text:
        raise InvalidCommand("name a registered engine or give an engine's URL", "engine")
    if "://" in text:
        return {"url": text}
    if not Engine.objects.filter(name=text).exists():
        known = ", ".join(Engine.objects.order_by("name").values_list("name", flat=True))
        raise InvalidCommand(
            f"no registered engine named {text!r} (registered: {known or 'none'}); "
            "give a URL or register it first",
            "engine",
        )
    return {"name": text}


def _engine_errors(refused: ConfigError, index: int) -> str:
    """The config's errors about the joining engine, or all of them (another part of the
    stored config may have stopped passing, a registered engine deleted since)."""
    own = [e.message for e in refused.errors if e.path.startswith(f"engine[{index}]")]
    return "; ".join(own or [f"{e.path}: {e.message}" for e in refused.errors])


async def _serves(config: RunConfig, joining: EngineSpec, model: str) -> None:
    """ConfigError unless ``joining`` answers and serves ``model`` (the one the run uses)."""
    async with httpx.AsyncClient() as http:
        await preflight(dataclasses.replace(config, model=model), [joining], http)


def share_set(
    *,
    run: Run,
    created_by: AbstractBaseUser | None,
    share: float | None = None,
    priority: int | None = None,
    reason: str = "",
) -> Override:
    """A new ``concurrency.share`` and/or ``concurrency.priority`` for ``run``: written into
    its stored config and, for a hosted run, into the claim its worker states at its next
    look, where every run sharing its engines is split anew."""
    if share is None and priority is None:
        raise InvalidCommand("give a share, a priority or both", "share")
    if share is not None and not SHARE_RANGE[0] <= share <= SHARE_RANGE[1]:
        raise InvalidCommand(f"share must be in [{SHARE_RANGE[0]:g}, {SHARE_RANGE[1]:g}]", "share")
    if priority is not None and not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
        low, high = PRIORITY_RANGE
        raise InvalidCommand(f"priority must be in [{low}, {high}]", "priority")
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.is_ended:
            raise CommandRefused(
                f"run {locked.pk} has ended ({locked.state}); it takes no commands"
            )
        document = copy.deepcopy(locked.config)
        table = document.setdefault("concurrency", {})
        if share is not None:
            table["share"] = share
        if priority is not None:
            table["priority"] = priority
        locked.config = document
        locked.save(update_fields=["config", "updated_at"])
        override = Override.objects.create(
            run=locked,
            created_by=created_by,
            mode=OverrideMode.SHARE,
            share=share,
            priority=priority,
            reason=reason,
        )
        _announce(locked, override)
    run.refresh_from_db()
    return override


def _announce(run: Run, override: Override) -> None:
    """Wake a hosted run's worker once committed; a run without one has it all in its config."""
    if run.state in HOSTED:
        run_id, override_id = run.pk, override.pk
        transaction.on_commit(lambda: publish_control(run_id, "override", id=override_id))
    else:
        override.applied_at = timezone.now()
        override.save(update_fields=["applied_at"])
