"""Writes: creating runs, operator commands, trainer acknowledgements, engine registration.

Each service checks what it is given, writes in one transaction and wakes a worker only once
the transaction has committed, so a task never races the row it is about. Errors are typed:
``ConfigError`` for a config (field errors), ``InvalidCommand`` for a command wrong in itself
(a 400), ``CommandRefused`` for one the run's state does not allow (a 409),
``IdempotencyConflict`` for a create's key used before with another body (a 422).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.runs.control import publish_control
from controlplane.runs.models import Engine, Override, OverrideMode, Run, RunState, StepRecord
from controlplane.runs.queue import enqueue
from controlplane.runs.selectors import trainer_mode
from workers.core.config.engine_urls import engine_url_problem, host_allowed
from workers.core.config.fields import ConfigError, FieldError
from workers.core.config.run import EngineSettings, RunConfig, parse_run_config
from workers.core.controller.overrides import MAX_PIN_TTL_S
from workers.core.samples import EngineRole
from workers.runtime.checkpoints import CheckpointRefused, check_checkpoint, checkpoint_root
from workers.runtime.run_folders import output_subfolder

MAX_OVERRIDE_CAP = 1_000_000  # as the core's sanity bound on any cap


class CommandRefused(Exception):
    """A command the run cannot take in its state; the message says why (the API's 409)."""


class InvalidCommand(ValueError):
    """A command that is wrong in itself, whatever the run's state (the API's 400), about
    the body's ``field`` (the whole body unless said)."""

    def __init__(self, message: str, field: str = "body") -> None:
        super().__init__(message)
        self.field = field


class IdempotencyConflict(Exception):
    """A create whose idempotency key an earlier create with another body used (the API's
    422, as payment APIs answer a key reused with other parameters)."""


def resolve_engines(config: RunConfig) -> tuple[RunConfig, list[str | None]]:
    """The config with every engine named by a registered name given its URL, role and
    ``max_num_seqs`` from the registry, and each engine's registered name (None for one
    given by URL). An unknown name is a field error at its engine."""
    engines: list[EngineSettings] = []
    names: list[str | None] = []
    errors: list[FieldError] = []
    registered = {
        e.name: e
        for e in Engine.objects.filter(name__in=[e.name for e in config.engines if e.name])
    }
    for index, engine in enumerate(config.engines):
        if engine.url is not None:
            engines.append(engine)
            names.append(None)
            continue
        row = registered.get(engine.name or "")
        if row is None:
            known = (
                ", ".join(Engine.objects.order_by("name").values_list("name", flat=True)) or "none"
            )
            errors.append(
                FieldError(
                    f"engine[{index}].name",
                    f"no registered engine named {engine.name!r} (registered: {known})",
                )
            )
            continue
        engines.append(
            dataclasses.replace(
                engine,
                url=row.url,
                role=EngineRole(row.role),
                max_num_seqs=engine.max_num_seqs or row.max_num_seqs,
            )
        )
        names.append(row.name)
    if errors:
        raise ConfigError(errors)
    return dataclasses.replace(config, engines=tuple(engines)), names


def check_engine_hosts(config: RunConfig, names: list[str | None]) -> None:
    """ConfigError for each engine whose host is not on ``PACER_ENGINE_HOSTS`` (when set),
    before anything asks it: at its URL, or at its name for a registered one."""
    allowed = settings.PACER_ENGINE_HOSTS
    errors: list[FieldError] = []
    for index, (engine, name) in enumerate(zip(config.engines, names, strict=True)):
        if engine.url is None or host_allowed(engine.url, allowed):
            continue
        where = f"engine[{index}].url" if name is None else f"engine[{index}].name"
        whose = "" if name is None else f"{name} is registered at "
        errors.append(FieldError(where, f"{whose}{engine.url}: {_host_not_allowed()}"))
    if errors:
        raise ConfigError(errors)


def _host_not_allowed() -> str:
    return f"its host is not on PACER_ENGINE_HOSTS ({', '.join(settings.PACER_ENGINE_HOSTS)})"


def run_config_resolve(document: object) -> tuple[RunConfig, list[str | None]]:
    """The config with its engines resolved (and their registered names), once it passes
    every check that asks no engine: the schema, registered engine names, the deployment's
    engine hosts, and an output folder under PACER_RUNS_DIR. A worker checks this again when
    it takes the run up."""
    config, names = resolve_engines(parse_run_config(document))
    check_engine_hosts(config, names)
    output_subfolder(Path(settings.PACER_RUNS_DIR), config.output_dir)
    return config, names


def run_config_check(document: object, *, check_engines: bool = True) -> RunConfig:
    """Every check a run's config must pass before anything starts: ``run_config_resolve``'s,
    and (unless told not to) that each engine answers and serves the model."""
    config, names = run_config_resolve(document)
    if check_engines:
        asyncio.run(_preflight(config, names))
    return config


async def _preflight(config: RunConfig, names: list[str | None]) -> str:
    from workers.runtime.engines import engine_specs, preflight

    async with httpx.AsyncClient() as http:
        return await preflight(config, engine_specs(config.engines, names), http)


def run_create(
    *,
    document: Mapping[str, Any],
    created_by: AbstractBaseUser | None,
    check_engines: bool = True,
    idempotency_key: str | None = None,
) -> Run:
    """Store a checked run and queue it; ConfigError with every field error otherwise. The
    task is sent once the run is stored, and a send that fails (Redis away) fails nothing:
    the sweep sends the task of a queued run nobody took (``controlplane.runs.queue``)."""
    config = run_config_check(document, check_engines=check_engines)
    with transaction.atomic():
        run = Run.objects.create(
            name=config.name,
            config=dict(document),
            created_by=created_by,
            state=RunState.QUEUED,
            enqueued_at=timezone.now(),
            idempotency_key=idempotency_key,
        )
        run_id = run.pk
        transaction.on_commit(lambda: enqueue(run_id))
    return run


def run_create_once(
    *,
    document: Mapping[str, Any],
    created_by: AbstractBaseUser,
    idempotency_key: str,
    check_engines: bool = True,
) -> tuple[Run, bool]:
    """``run_create`` for a client that may retry: (the run, whether an earlier create made
    it). The first create with a key stores the run with it; a later one with the same key
    and the same document answers with that run, nothing checked, stored or sent again (its
    engines may be away by then, and the first answer was given); with another document it
    is an IdempotencyConflict. Keys are the user's own: one user's key never finds another's
    run. Two creates with one key at once meet at the unique constraint, and the loser
    answers as a retry would."""
    earlier = _keyed_run(created_by, idempotency_key)
    if earlier is None:
        try:
            run = run_create(
                document=document,
                created_by=created_by,
                check_engines=check_engines,
                idempotency_key=idempotency_key,
            )
        except IntegrityError:
            earlier = _keyed_run(created_by, idempotency_key)
            if earlier is None:
                raise
        else:
            return run, False
    if not same_document(earlier.config, document):
        raise IdempotencyConflict(
            f"Idempotency-Key {idempotency_key!r} was used for run {earlier.pk} with another "
            "body: send the same body to retry that create, or a new key for a new run"
        )
    return earlier, True


def _keyed_run(user: AbstractBaseUser, key: str) -> Run | None:
    return Run.objects.filter(created_by=user, idempotency_key=key).first()


def same_document(stored: object, sent: object) -> bool:
    """Whether two config documents are the same JSON: key order aside, but ``1`` is not
    ``1.0`` nor ``true`` (Python's ``==`` would say they are). What JSON cannot hold (a
    TOML date) is compared by its repr, so it is never the same as what was stored."""

    def canonical(document: object) -> str:
        return json.dumps(document, sort_keys=True, default=repr)

    return canonical(stored) == canonical(sent)


def override_create(
    *,
    run: Run,
    created_by: AbstractBaseUser | None,
    mode: str,
    cap: int | None = None,
    ttl_s: float | None = None,
    reason: str = "",
) -> Override:
    """Store an operator's command and wake the run's worker; a run without a worker takes
    cap commands when it next starts, and pause, resume and stop change its state here."""
    _check_command(mode, cap, ttl_s)
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.is_ended:
            raise CommandRefused(
                f"run {locked.pk} has ended ({locked.state}); it takes no commands"
            )
        override = Override.objects.create(
            run=locked, created_by=created_by, mode=mode, cap=cap, ttl_s=ttl_s, reason=reason
        )
        hosted = locked.state in (RunState.RUNNING, RunState.STOPPING)
        if mode in (OverrideMode.PAUSE, OverrideMode.RESUME, OverrideMode.STOP):
            _change_state(locked, override, hosted)
        run_id, override_id = locked.pk, override.pk
        if hosted:
            transaction.on_commit(lambda: publish_control(run_id, "override", id=override_id))
    run.refresh_from_db()
    return override


def _check_command(mode: str, cap: int | None, ttl_s: float | None) -> None:
    if mode not in OverrideMode.values:
        raise InvalidCommand(f"mode must be one of {', '.join(OverrideMode.values)}, got {mode!r}")
    needs_cap = mode in (OverrideMode.PIN, OverrideMode.SET)
    if needs_cap and cap is None:
        raise InvalidCommand(f"{mode} needs a cap")
    if not needs_cap and cap is not None:
        raise InvalidCommand(f"{mode} takes no cap")
    if (mode == OverrideMode.PIN) != (ttl_s is not None):
        raise InvalidCommand("a pin needs ttl_s, and only a pin takes one")
    if cap is not None and not 1 <= cap <= MAX_OVERRIDE_CAP:
        raise InvalidCommand(f"cap must be in [1, {MAX_OVERRIDE_CAP}], got {cap}")
    if ttl_s is not None and not 0 < ttl_s <= MAX_PIN_TTL_S:
        raise InvalidCommand(f"ttl_s must be in (0, {MAX_PIN_TTL_S:g}] seconds, got {ttl_s}")


def _change_state(run: Run, override: Override, hosted: bool) -> None:
    """Pause, resume and stop where they act on the stored run; a hosted run's worker acts on
    the message and records the outcome."""
    mode, now = override.mode, timezone.now()
    if mode == OverrideMode.RESUME:
        if run.state != RunState.PAUSED:
            raise CommandRefused(f"run {run.pk} is {run.state}, not paused: nothing to resume")
        run.state, run.enqueued_at = RunState.QUEUED, now
        run.save(update_fields=["state", "enqueued_at", "updated_at"])
        run_id = run.pk
        transaction.on_commit(lambda: enqueue(run_id))
        _applied(override, now)
    elif mode == OverrideMode.PAUSE:
        if run.state == RunState.PAUSED:
            raise CommandRefused(f"run {run.pk} is paused already")
        if not hosted:
            run.state = RunState.PAUSED
            run.save(update_fields=["state", "updated_at"])
            _applied(override, now)
    elif hosted:  # stop a running run: its worker winds it down
        run.state = RunState.STOPPING
        run.save(update_fields=["state", "updated_at"])
    else:
        run.state, run.finished_at = RunState.CANCELLED, now
        run.error = f"stopped by an operator before it ran: {override.reason}".rstrip(": ")
        run.save(update_fields=["state", "finished_at", "error", "updated_at"])
        _applied(override, now)


def _applied(override: Override, at: Any) -> None:
    override.applied_at = at
    override.save(update_fields=["applied_at"])


def step_acknowledge(
    *, run: Run, step: int, policy_version: int, checkpoint: str | None = None
) -> tuple[StepRecord, bool]:
    """The trainer has trained on ``step`` and serves ``policy_version``, its weights in the
    folder ``checkpoint`` if given; (the record, whether this call acknowledged it). The
    checkpoint is checked first (InvalidCommand at ``checkpoint`` when it is not a loadable
    model folder under the run's checkpoint root). A repeated acknowledgement with the same
    version and checkpoint changes nothing; one for a step not written yet, or with another
    version or checkpoint, is refused."""
    mode = trainer_mode(run)
    if mode != "external":
        raise CommandRefused(
            f"run {run.pk} has trainer mode {mode!r}: its steps need no acknowledgement "
            "(only trainer mode 'external' waits for one)"
        )
    with transaction.atomic():
        record = StepRecord.objects.select_for_update().filter(run=run, step=step).first()
        if record is None:
            raise CommandRefused(f"step {step} of run {run.pk} is not written yet")
        folder = "" if checkpoint is None else _checked_checkpoint(run, checkpoint)
        if record.acked_at is not None:
            if record.acked_version != policy_version:
                raise CommandRefused(
                    f"step {step} was acknowledged with policy version {record.acked_version}, "
                    f"not {policy_version}"
                )
            if record.acked_checkpoint != folder:
                raise CommandRefused(
                    f"step {step} was acknowledged with checkpoint "
                    f"{record.acked_checkpoint or 'none'}, not {folder or 'none'}"
                )
            return record, False
        if policy_version < record.policy_version:
            raise CommandRefused(
                f"policy version {policy_version} is behind the step's own "
                f"({record.policy_version})"
            )
        record.acked_at, record.acked_version = timezone.now(), policy_version
        record.acked_checkpoint = folder
        record.save(update_fields=["acked_at", "acked_version", "acked_checkpoint"])
        run_id = run.pk
        transaction.on_commit(lambda: publish_control(run_id, "ack", step=step))
    return record, True


def _checked_checkpoint(run: Run, asked: str) -> str:
    """``asked`` resolved, once it is a loadable model folder under the run's checkpoint
    root: ``PACER_CHECKPOINTS_DIR``, or the folder its host writes in (known once it wrote a
    step: never ``""``, which would be the web process's working folder)."""
    if not (settings.PACER_CHECKPOINTS_DIR or run.output_dir):
        raise CommandRefused(f"run {run.pk} has no folder yet for its checkpoints to be in")
    root = checkpoint_root(settings.PACER_CHECKPOINTS_DIR, Path(run.output_dir))
    try:
        return str(check_checkpoint(asked, root))
    except CheckpointRefused as refused:
        raise InvalidCommand(str(refused), field="checkpoint") from None


def engine_register(
    *, name: str, url: str, role: str = "unified", max_num_seqs: int | None = None
) -> Engine:
    """Create or update an engine by name (the run command registers its simulated ones);
    ValidationError, with nothing saved, for a bad name, URL or role, or a host that is not
    on ``PACER_ENGINE_HOSTS``."""
    problem = engine_url_problem(url)
    if problem is None and not host_allowed(url, settings.PACER_ENGINE_HOSTS):
        problem = _host_not_allowed()
    if problem is not None:
        raise ValidationError({"url": [problem]})
    engine = Engine.objects.filter(name=name).first() or Engine(name=name)
    engine.url, engine.role, engine.max_num_seqs = url, role, max_num_seqs
    engine.full_clean()
    engine.save()
    return engine


def engine_delete(*, engine: Engine, in_use: list[int]) -> None:
    """Remove a registered engine; refused while an active run (``in_use``) names it, since
    that run resolves its engines by name again whenever a worker takes it up."""
    if in_use:
        listed = ", ".join(str(run_id) for run_id in in_use)
        raise CommandRefused(f"engine {engine.name} is named by active runs: {listed}")
    engine.delete()
