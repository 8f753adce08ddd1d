"""Workload files: what a benchmark runs, read from TOML and checked field by field.

A workload names simulated engines, the run's environments (the run config's own ``[[env]]``
tables, so every environment and load shape of the project is available and validated by
its own rules), the run's size and timed events. The README's "Benchmarks" section
documents every key. Errors carry the path of their field (``engine[1].kv_tokens``,
``env[0].args.turns``, ``event[2].kind``), all of them at once, as run configs' do.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.virtual.engines import EngineShape
from inference.sim.cost import StepCost
from inference.sim.presets import PRESETS
from inference.sim.sampling import LengthDistribution
from workers.core.config.fields import ConfigError, Errors, FieldError, Table, join
from workers.core.config.run import RunConfig, parse_run_config
from workers.core.members import DEFAULT_DRAIN_S, MAX_DRAIN_S
from workers.core.samples import EngineRole

EVENT_KINDS = (
    "lengths",
    "engine_down",
    "engine_up",
    "eval_wave",
    "kv",
    "engine_join",
    "engine_leave",
)
POOL_KINDS = ("engine_join", "engine_leave")  # an operator's: each names exactly one engine
COST_FIELDS = (
    "step_overhead_s",
    "per_batched_token_s",
    "per_seq_s",
    "per_context_token_s",
    "per_attention_pair_s",
)
RUN_KEYS = ("batch_size", "group_size", "max_off_policy_steps", "eval_every", "seed")
MAX_SECONDS = 86_400.0  # a day of virtual time: far past any benchmark's use
UPDATE_MODES = ("sync", "rolling")  # the run config's [trainer] updates


@dataclass(frozen=True, slots=True)
class Event:
    at: float  # virtual seconds from the start
    kind: str
    factor: float  # lengths: answer-length multiplier; kv: KV-cache multiplier
    engines: tuple[int, ...]  # which engines (indices) it touches; every one when not named
    drain_s: float = DEFAULT_DRAIN_S  # engine_leave: the episodes on it have this long


@dataclass(frozen=True, slots=True)
class Training:
    """A trainer in the loop: each step acknowledged ``train_s`` after it is written, with a
    new checkpoint that every engine reloads (``updates``: sync or rolling)."""

    updates: str
    train_s: float


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    description: str
    seconds: float  # virtual duration of one run
    poll_interval_s: float
    engines: tuple[EngineShape, ...]
    events: tuple[Event, ...]
    document: dict[str, Any]  # the run config's document, minus the concurrency table
    path: str
    training: Training | None = None  # None: steps are done once written, weights never move

    def run_config(self, concurrency: dict[str, Any]) -> RunConfig:
        """The run config a benchmark run uses, with the policy's concurrency table."""
        document = {**self.document, "concurrency": concurrency}
        if self.training is not None:
            # The virtual trainer always answers: the timeout only has to exceed its time.
            timeout = 10 * self.training.train_s + 60.0
            trainer = {"mode": "external", "ack_timeout_s": timeout}
            document["trainer"] = {**trainer, "updates": self.training.updates}
        return parse_run_config(document)

    @property
    def joining(self) -> frozenset[str]:
        """The engines not in the run at its start: those an ``engine_join`` brings in."""
        return frozenset(
            self.engines[e.engines[0]].name for e in self.events if e.kind == "engine_join"
        )

    def with_every_engine(self) -> Workload:
        """The same workload with every engine in the run from the start (its engine_join
        events dropped): the pool a join leads to, whose own best the join benchmark reads
        the ramp after the join against."""
        kept = tuple(e for e in self.events if e.kind != "engine_join")
        return dataclasses.replace(self, events=kept)

    @property
    def serving(self) -> tuple[EngineShape, ...]:
        """The engines episodes are routed to: every one but the prefill engines."""
        return tuple(e for e in self.engines if e.role is not EngineRole.PREFILL)


def load_workload(path: str | Path) -> Workload:
    """Read and check a workload file; ConfigError lists every problem."""
    return parse_workload(read_toml(path), str(path))


def read_toml(path: str | Path) -> object:
    """A workload file's document; ConfigError when it is not TOML."""
    try:
        return tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as bad:
        raise ConfigError([FieldError("", f"the TOML does not parse: {bad}")]) from None


def parse_workload(document: object, path: str = "<workload>") -> Workload:
    errors = Errors()
    top = Table(document, "", errors)
    meta = top.table("workload")
    name = meta.string("name")
    description = meta.string("description", "")
    meta.finish()
    if isinstance(top.raw("run", None), list):
        errors.add(
            "run", "[[run]] tables make a multi-run workload: python -m bench share reads it"
        )
        run = Table({}, "run", errors)
    else:
        run = top.table("run")
    seconds = run.number("seconds", 1200.0, low=1.0, high=MAX_SECONDS)
    poll = run.number("poll_interval_s", 5.0, low=0.1, high=3600.0)
    run_doc = {key: run.raw(key) for key in RUN_KEYS if run.has(key)}
    for key in RUN_KEYS:
        run.raw(key, None)
    run.finish()
    engines = [e for table in top.tables("engine") for e in _engines(table)]
    if not top.has("engine"):
        errors.add("engine", "at least one [[engine]] is required")
    envs = top.raw("env", [])
    events = [_event(table, len(engines), seconds or MAX_SECONDS) for table in top.tables("event")]
    training = _training(top.table("trainer")) if top.has("trainer") else None
    top.finish()
    document_out = {
        "name": name or "workload",
        "max_steps": 100_000_000,  # the run ends at the horizon, never by steps
        **run_doc,
        "env": envs,
        "engine": [{"name": e.name, "role": e.role.value} for e in engines],
    }
    if not errors.found:
        _check_run(document_out, errors)
    if engines and not any(e.role is not EngineRole.PREFILL for e in engines):
        errors.add("engine", "at least one engine must be unified or decode")
    _check_events(events, document_out, errors)
    _check_pool(events, engines, errors)
    errors.raise_if_any()
    return Workload(
        name=name,
        description=description,
        seconds=seconds,
        poll_interval_s=poll,
        engines=tuple(engines),
        events=tuple(e for e in events if e is not None),
        document=document_out,
        path=path,
        training=training,
    )


def _training(table: Table) -> Training | None:
    updates = table.string("updates", "sync", choices=UPDATE_MODES)
    train_s = table.number("train_s", low=0.0, high=MAX_SECONDS)
    table.finish()
    if updates is None or train_s is None:
        return None
    return Training(updates, train_s)


def _engines(table: Table) -> list[EngineShape]:
    """An ``[[engine]]`` table: ``count`` engines of one shape."""
    count = table.integer("count", 1, low=1, high=64)
    preset_name = table.string("preset", "h100-8b", choices=tuple(PRESETS))
    preset = PRESETS.get(preset_name or "h100-8b", PRESETS["h100-8b"])
    role = table.string("role", "unified", choices=tuple(r.value for r in EngineRole))
    kv = table.integer("kv_tokens", preset.kv_tokens, low=1, high=1 << 34)
    block = table.integer("block_size", preset.block_size, low=1, high=4096)
    seqs = table.integer("max_num_seqs", preset.max_num_seqs, low=1, high=1_000_000)
    batched = table.integer(
        "max_num_batched_tokens", preset.max_num_batched_tokens, low=1, high=1 << 24
    )
    model_len = table.integer("max_model_len", preset.max_model_len, low=2, high=1 << 24)
    reload_s = table.number("reload_s", preset.reload_s, low=0.0, high=3600.0)
    costs = {f: table.number(f, getattr(preset.cost, f), low=0.0, high=10.0) for f in COST_FIELDS}
    answer = table.string("answer_length", None)
    table.finish()
    length = None
    if answer is not None:
        try:
            length = LengthDistribution.parse(answer)
        except ValueError as bad:
            table.errors.add(join(table.path, "answer_length"), str(bad))
    if kv is not None and block is not None and kv < block:
        table.errors.add(join(table.path, "kv_tokens"), f"must hold one block ({block})")
    if None in (count, role, kv, block, seqs, batched, model_len, reload_s, *costs.values()):
        return []
    try:
        cost = StepCost(**costs)
    except ValueError as bad:
        table.errors.add(table.path, str(bad))
        return []
    index = table.path.removeprefix("engine[").rstrip("]")
    return [
        EngineShape(
            name=f"{role}-{index}-{k}" if count > 1 else f"{role}-{index}",
            role=EngineRole(role),
            cost=cost,
            kv_tokens=kv,
            block_size=block,
            max_num_seqs=seqs,
            max_num_batched_tokens=batched,
            max_model_len=min(model_len, kv),
            answer_length=length,
            reload_s=reload_s,
        )
        for k in range(count)
    ]


def _event(table: Table, engines: int, seconds: float) -> Event | None:
    at = table.number("at_s", low=0.0, high=seconds)
    kind = table.string("kind", choices=EVENT_KINDS)
    factor = table.number("factor", 1.0, low=0.01, high=100.0)
    drain_s = table.number("drain_s", DEFAULT_DRAIN_S, low=0.0, high=MAX_DRAIN_S)
    named = table.raw("engine", None)
    table.finish()
    if kind in POOL_KINDS and named is None:
        table.errors.add(join(table.path, "engine"), f"{kind} names one engine (engine = k)")
        return None
    chosen: tuple[int, ...] = tuple(range(engines))
    if named is not None:
        if isinstance(named, bool) or not isinstance(named, int) or not 0 <= named < engines:
            path = join(table.path, "engine")
            table.errors.add(path, f"must be an engine index 0..{engines - 1}, got {named!r}")
            return None
        chosen = (named,)
    if at is None or kind is None or factor is None or drain_s is None:
        return None
    return Event(at, kind, factor, chosen, drain_s)


def _check_run(document: dict[str, Any], errors: Errors) -> None:
    """The run config's own checks, with the workload's paths for ``[run]`` keys."""
    try:
        parse_run_config({**document, "concurrency": {}})
    except ConfigError as refused:
        for error in refused.errors:
            head = error.path.split(".", 1)[0].split("[", 1)[0]
            errors.add(f"run.{error.path}" if head in RUN_KEYS else error.path, error.message)


def _check_events(events: list[Event | None], document: dict[str, Any], errors: Errors) -> None:
    envs = document.get("env") or []
    has_eval = any(isinstance(e, dict) and e.get("kind") == "eval" for e in envs)
    for index, event in enumerate(events):
        if event is None:
            continue
        if event.kind == "eval_wave" and not has_eval:
            errors.add(f"event[{index}].kind", 'eval_wave needs an [[env]] with kind = "eval"')


def _check_pool(events: list[Event | None], engines: list[EngineShape], errors: Errors) -> None:
    """The run's engines over time, as the events change them, in time order (file order at
    one instant): an engine joins once, only when not in the run, and leaves only when in
    it; the run always keeps a serving engine; engine_down and engine_up touch engines in
    the run. A leaving engine is out from its event on (its drain may end any time up to
    ``drain_s`` later), so that no event depends on how long the drain took."""
    timed = sorted(
        ((index, e) for index, e in enumerate(events) if e is not None), key=lambda p: p[1].at
    )
    joining = {e.engines[0] for _, e in timed if e.kind == "engine_join"}
    serving = {i for i, shape in enumerate(engines) if shape.role is not EngineRole.PREFILL}
    members = serving - joining
    if serving and not members:
        errors.add("event", "every serving engine joins later: one must be in the run at 0 s")
        return
    joined: set[int] = set()
    for index, event in timed:
        if not event.engines:
            continue
        path, named = f"event[{index}].engine", event.engines[0]
        where = f"engine {named} ({engines[named].name})"
        alone = len(event.engines) == 1  # named (unnamed: every engine in the run then)
        if event.kind in POOL_KINDS and named not in serving:
            errors.add(path, f"{where} is a prefill engine: it takes no episodes to join with")
        elif event.kind == "engine_join" and (named in members or named in joined):
            again = "in the run" if named in members else "gone: an engine joins a run once"
            errors.add(path, f"{where} is {again} at {event.at:g} s")
        elif event.kind == "engine_join":
            members.add(named)
            joined.add(named)
        elif event.kind == "engine_leave" and named not in members:
            errors.add(path, f"{where} is not in the run at {event.at:g} s")
        elif event.kind == "engine_leave" and members == {named}:
            errors.add(path, f"{where} is the run's last engine at {event.at:g} s")
        elif event.kind == "engine_leave":
            members.discard(named)
        elif event.kind in ("engine_down", "engine_up") and alone and named in serving - members:
            errors.add(path, f"{where} is not in the run at {event.at:g} s")
