"""The run config: what a run is asked to do, read from TOML or JSON and checked before
anything starts.

Field names follow prime-rl's orchestrator where it has them (``batch_size``, ``group_size``,
``max_off_policy_steps``...). Every threshold of the core can be set, under the names of the
core's own config dataclasses, and is judged by their own checks:

    name = "agentic"
    model = "auto"            # the one model the engines serve
    batch_size = 64           # episodes per step, a multiple of group_size
    group_size = 8
    max_steps = 100

    [concurrency]
    policy = "pacer"          # pacer, reference, fixed or gradient2
    max_inflight = 512        # and every other ControllerConfig field
    [concurrency.pacer]       # PacerConfig fields; [concurrency.reference], [concurrency.pacing],
                              # [concurrency.gradient2]
    target_kv_usage = 0.85
    [concurrency.breaker]     # BreakerConfig: failing engines out of routing, and giving up
    failures = 5

    [[env]]
    name = "multiturn"
    args = { turns = 4 }
    [env.sampling]
    max_tokens = 256

    [[engine]]
    url = "http://127.0.0.1:8100"
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workers.core.config.engine_urls import engine_url_problem
from workers.core.config.fields import ConfigError, Errors, FieldError, Table, read_into
from workers.core.control_loop import LoopConfig
from workers.core.controller.concurrency import Controller
from workers.core.controller.observe import ObserveOnly
from workers.core.controller.policies.base import Policy
from workers.core.controller.policies.fixed import FixedPolicy
from workers.core.controller.policies.gradient2 import Gradient2Config, Gradient2Policy
from workers.core.controller.policies.pacer import PacerConfig, PacerPolicy
from workers.core.controller.policies.pacer_config import RETIRED
from workers.core.controller.policies.reference import ReferenceConfig, ReferencePolicy
from workers.core.controller.records import ControllerConfig
from workers.core.dispatch.breaker import BreakerConfig
from workers.core.dispatch.pacing import PacingConfig
from workers.core.dispatch.permits import EpisodeKind
from workers.core.dispatch.records import DispatcherConfig
from workers.core.environments.base import Environment, Sampling
from workers.core.environments.registry import make_environment
from workers.core.samples import EngineRole
from workers.core.sharing import PRIORITY_RANGE, SHARE_RANGE

POLICIES = ("pacer", "reference", "fixed", "gradient2")
TRAINER_MODES = ("none", "external")
UPDATE_MODES = ("sync", "rolling")
WANDB_MODES = ("offline", "disabled", "online")
AUTO_MODEL = "auto"  # take the one model the engines serve


@dataclass(frozen=True, slots=True)
class ConcurrencySettings:
    policy: str
    observe: bool  # decide in the shadow, never move the real cap
    poll_interval_s: float
    controller: ControllerConfig
    pacing: PacingConfig
    pacer: PacerConfig
    reference: ReferenceConfig
    gradient2: Gradient2Config
    breaker: BreakerConfig
    # Runs sharing engines split them (``workers.core.sharing``): by priority, highest
    # first, then in proportion to their shares.
    share: float = 1.0
    priority: int = 0

    def make_policy(self) -> Policy:
        if self.policy == "pacer":
            return PacerPolicy(self.pacer)
        if self.policy == "gradient2":
            return Gradient2Policy(self.gradient2)
        if self.policy == "reference":
            return ReferencePolicy(self.reference)
        return FixedPolicy(self.reference)  # fixed reads the reference's signals

    def make_controller(self) -> Controller | ObserveOnly:
        controller = Controller(self.controller, self.make_policy())
        return ObserveOnly(controller) if self.observe else controller

    def restore_controller(
        self, stored: Mapping[str, Any], *, now: float, away: float = 0.0
    ) -> tuple[Controller | ObserveOnly, Any]:
        """A controller continued from ``to_json`` output saved ``away`` seconds ago, and its
        restore decision."""
        policy = self.make_policy()
        if self.observe:
            return ObserveOnly.restore(self.controller, policy, stored, now=now, away=away)
        return Controller.restore(self.controller, policy, stored, now=now, away=away)

    @property
    def loop(self) -> LoopConfig:
        return LoopConfig(poll_period=self.poll_interval_s)


@dataclass(frozen=True, slots=True)
class EnvSettings:
    name: str
    kind: EpisodeKind
    weight: float  # train: share of the groups drawn from this environment
    episodes: int  # eval: episodes per evaluation wave
    sampling: Sampling
    environment: Environment


@dataclass(frozen=True, slots=True)
class EngineSettings:
    url: str | None  # None for an engine named here and registered elsewhere
    name: str | None
    role: EngineRole
    max_num_seqs: int | None  # the engine's --max-num-seqs, for the warning vLLM cannot give


@dataclass(frozen=True, slots=True)
class TrainerSettings:
    mode: str  # none: a step is done once written; external: once the trainer acknowledges it
    ack_timeout_s: float
    # How an acknowledged checkpoint reaches the engines (workers/core/orchestrator/relay.py):
    # sync, every engine at once (on-policy), or rolling, one at a time (the pool serves on).
    updates: str = "sync"


@dataclass(frozen=True, slots=True)
class WandbSettings:
    project: str
    mode: str


@dataclass(frozen=True, slots=True)
class RunConfig:
    name: str
    model: str
    batch_size: int
    group_size: int
    max_steps: int
    max_off_policy_steps: int
    eval_every: int  # steps between evaluation waves; 0 for none
    seed: int
    concurrency: ConcurrencySettings
    envs: tuple[EnvSettings, ...]
    engines: tuple[EngineSettings, ...]
    trainer: TrainerSettings
    wandb: WandbSettings
    output_dir: str | None  # None: the runtime's default, var/runs/<run id>/
    document: Mapping[str, Any]  # the config as given, for storage and display

    @property
    def train_envs(self) -> tuple[EnvSettings, ...]:
        return tuple(e for e in self.envs if e.kind is EpisodeKind.TRAIN)

    @property
    def eval_envs(self) -> tuple[EnvSettings, ...]:
        return tuple(e for e in self.envs if e.kind is EpisodeKind.EVAL)

    @property
    def dispatcher(self) -> DispatcherConfig:
        return DispatcherConfig(
            max_off_policy_steps=self.max_off_policy_steps,
            pacing=self.concurrency.pacing,
            breaker=self.concurrency.breaker,
        )


def parse_run_config(document: object) -> RunConfig:
    """Read a parsed config; ConfigError lists every field error at once."""
    errors = Errors()
    top = Table(document, "", errors)
    name = top.string("name")
    model = top.string("model", AUTO_MODEL)
    batch_size = top.integer("batch_size", 64, low=1, high=1_000_000)
    group_size = top.integer("group_size", 8, low=1, high=10_000)
    max_steps = top.integer("max_steps", 100, low=1, high=100_000_000)
    off_policy = top.integer("max_off_policy_steps", 8, low=0, high=1_000_000)
    eval_every = top.integer("eval_every", 0, low=0, high=100_000_000)
    seed = top.integer("seed", 0, low=0, high=(1 << 63) - 1)
    concurrency = _concurrency(top.table("concurrency"))
    envs = [_env(table, batch_size) for table in top.tables("env")]
    engine_tables = top.tables("engine")
    engines = [_engine(table) for table in engine_tables]
    trainer = _trainer(top.table("trainer"))
    wandb = _wandb(top.table("wandb"))
    output = top.table("output")
    output_dir = output.string("dir", None)
    output.finish()
    top.finish()
    if batch_size and group_size and batch_size % group_size:
        errors.add(
            "batch_size", f"must be a multiple of group_size ({group_size}), got {batch_size}"
        )
    _check_envs(envs, eval_every, errors)
    if not engine_tables:
        errors.add("engine", "at least one [[engine]] is required")
    errors.raise_if_any()
    return RunConfig(
        name=name,
        model=model,
        batch_size=batch_size,
        group_size=group_size,
        max_steps=max_steps,
        max_off_policy_steps=off_policy,
        eval_every=eval_every,
        seed=seed,
        concurrency=concurrency,  # type: ignore[arg-type]
        envs=tuple(envs),  # type: ignore[arg-type]
        engines=tuple(engines),  # type: ignore[arg-type]
        trainer=trainer,
        wandb=wandb,
        output_dir=output_dir,
        document=document,  # type: ignore[arg-type]
    )


def parse_run_config_text(text: str, kind: str) -> RunConfig:
    """Read a config from TOML or JSON text; a document that does not parse is a ConfigError
    saying where."""
    try:
        document = tomllib.loads(text) if kind == "toml" else json.loads(text)
    except tomllib.TOMLDecodeError as bad:
        raise ConfigError([FieldError("", f"the TOML does not parse: {bad}")]) from None
    except json.JSONDecodeError as bad:
        raise ConfigError([FieldError("", f"the JSON does not parse: {bad}")]) from None
    return parse_run_config(document)


def _concurrency(table: Table) -> ConcurrencySettings | None:
    policy = table.string("policy", "pacer", choices=POLICIES)
    observe = table.boolean("observe", False)
    poll = table.number("poll_interval_s", LoopConfig().poll_period, low=0.001, high=3600.0)
    controller = read_into(ControllerConfig, table)
    pacing = table.dataclass(PacingConfig, "pacing")
    pacer = table.dataclass(PacerConfig, "pacer", retired=RETIRED)
    reference = table.dataclass(ReferenceConfig, "reference")
    gradient2 = table.dataclass(Gradient2Config, "gradient2")
    breaker = table.dataclass(BreakerConfig, "breaker")
    share = table.number("share", 1.0, low=SHARE_RANGE[0], high=SHARE_RANGE[1])
    priority = table.integer("priority", 0, low=PRIORITY_RANGE[0], high=PRIORITY_RANGE[1])
    table.finish()
    parts = (policy, observe, poll, controller, pacing, pacer, reference, gradient2, breaker)
    if any(part is None for part in (*parts, share, priority)):
        return None
    return ConcurrencySettings(*parts, share=share, priority=priority)  # type: ignore[arg-type]


def _env(table: Table, batch_size: int | None) -> EnvSettings | None:
    name = table.string("name")
    kind = table.string("kind", "train", choices=tuple(k.value for k in EpisodeKind))
    weight = table.number("weight", 1.0, low=1e-9, high=1e9)
    episodes = table.integer("episodes", batch_size or 1, low=1, high=1_000_000)
    sampling = table.dataclass(Sampling, "sampling")
    args = table.table("args")
    environment = make_environment(name, args, f"{table.path}.name") if name else None
    table.finish()
    if None in (name, kind, weight, episodes, sampling, environment):
        return None
    return EnvSettings(name, EpisodeKind(kind), weight, episodes, sampling, environment)  # type: ignore[arg-type]


def _engine(table: Table) -> EngineSettings | None:
    url = table.string("url", None)
    name = table.string("name", None)
    role = table.string(
        "role", EngineRole.UNIFIED.value, choices=tuple(r.value for r in EngineRole)
    )
    max_num_seqs = table.integer("max_num_seqs", None, low=1, high=1_000_000)
    table.finish()
    if (url is None) == (name is None):
        table.errors.add(table.path, "give the engine's url, or the name of a registered engine")
        return None
    problem = None if url is None else engine_url_problem(url)
    if problem is not None:
        table.errors.add(f"{table.path}.url", problem)
        return None
    if role is None:
        return None
    return EngineSettings(url, name, EngineRole(role), max_num_seqs)


def _trainer(table: Table) -> TrainerSettings:
    mode = table.string("mode", "none", choices=TRAINER_MODES)
    timeout = table.number("ack_timeout_s", 900.0, low=0.001, high=7 * 86_400.0)
    updates = table.string("updates", "sync", choices=UPDATE_MODES)
    table.finish()
    return TrainerSettings(mode or "none", timeout or 900.0, updates or "sync")


def _wandb(table: Table) -> WandbSettings:
    project = table.string("project", "pacer")
    mode = table.string("mode", "offline", choices=WANDB_MODES)
    table.finish()
    return WandbSettings(project or "pacer", mode or "offline")


def _check_envs(envs: list[EnvSettings | None], eval_every: int | None, errors: Errors) -> None:
    made = [env for env in envs if env is not None]
    if len(made) < len(envs):
        return  # their own errors say enough
    if not any(env.kind is EpisodeKind.TRAIN for env in made):
        errors.add("env", 'at least one [[env]] with kind = "train" is required')
    has_eval = any(env.kind is EpisodeKind.EVAL for env in made)
    if eval_every and not has_eval:
        errors.add("eval_every", 'is set but no [[env]] has kind = "eval"')
    if has_eval and not eval_every:
        errors.add("eval_every", 'must be > 0 when an [[env]] has kind = "eval"')
