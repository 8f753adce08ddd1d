"""A workload fitted to a recorded run, so an operator can try a policy in simulation on
the load the last run actually saw before starting the next one.

Pure: plain records in, a workload document out (``fit_workload``), and that document as
TOML (``workload_toml``). The Django reader that fills the records is ``recorded.py``; keeping
the ORM out of here lets the fit be tested without a database.

What is measured and what is carried over from the run's config:

- completion length: the recorded generated tokens per completed episode (step records),
  spread over the environments' mean turns; an environment that shapes its answers
  (``completion_tokens``) keeps its distribution's shape, moved to that mean; one that lets
  the model end its answer gets it as the engines' ``answer_length``;
- turns, prompt and observation shapes and environment latency: the config's ``[[env]]``
  tables as given (the records hold no per-turn timing);
- engines: one per engine id in the samples, with the largest KV capacity and
  ``max_model_len`` it reported, and ``max_num_seqs`` where the config or the engine
  registry gave one; the step-cost constants are the preset's (a poll does not measure them);
- batch and group size, off-policy limit, seed and poll interval: the config's;
- duration: the recorded run's elapsed time, from its start to its last written step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.virtual.workload import RUN_KEYS
from workers.core.config.fields import ConfigError, FieldError

SHAPED_ENVS = ("multiturn", "longtail")  # environments that read ``completion_tokens``
ANSWER_SIGMA = 0.5  # the engines' answer spread where the model ends its answer: a guess
BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True, slots=True)
class StepTotals:
    """One written step, as far as the fit reads it."""

    episodes: int
    tokens: int  # generated tokens of the step's completed episodes


@dataclass(frozen=True, slots=True)
class EngineSeen:
    """One engine as the run's samples saw it (the largest figures it reported)."""

    engine_id: str
    role: str
    kv_capacity_tokens: int | None
    max_model_len: int | None
    max_num_seqs: int | None  # from the run's config or the engine registry


@dataclass(frozen=True, slots=True)
class RecordedRun:
    run_id: int
    name: str
    config: Mapping[str, Any]  # the run config's document as given
    elapsed_s: float  # from the run's start to its last written step
    steps: Sequence[StepTotals]
    engines: Sequence[EngineSeen]

    @property
    def tokens_per_s(self) -> float:
        """Completed-episode tokens per second over the whole run: the benchmark's objective,
        so the two can be compared."""
        return sum(s.tokens for s in self.steps) / self.elapsed_s if self.elapsed_s else 0.0


def fit_workload(run: RecordedRun) -> dict[str, Any]:
    """The workload document of a recorded run; ConfigError when the records cannot carry
    one (no written step, no engine sample, no ``[[env]]``)."""
    problems = []
    if not run.steps or not sum(s.episodes for s in run.steps):
        problems.append(FieldError("steps", f"run {run.run_id} has no written step to measure"))
    if not run.engines:
        problems.append(FieldError("samples", f"run {run.run_id} has no engine sample"))
    envs = run.config.get("env")
    if not isinstance(envs, list) or not envs:
        problems.append(FieldError("config.env", f"run {run.run_id}'s config has no [[env]]"))
    if run.elapsed_s <= 0:
        problems.append(FieldError("elapsed", f"run {run.run_id} has no elapsed time"))
    if problems:
        raise ConfigError(problems)
    per_episode = sum(s.tokens for s in run.steps) / sum(s.episodes for s in run.steps)
    per_turn = max(1.0, per_episode / _mean_turns(envs))
    fitted_envs = [_fit_env(env, per_turn) for env in envs]
    model_decides = any(_model_decides(env) for env in envs)
    answer = f"lognormal:{per_turn:.1f}:{ANSWER_SIGMA}" if model_decides else None
    concurrency = run.config.get("concurrency") or {}
    run_table: dict[str, Any] = {"seconds": round(run.elapsed_s, 1)}
    if "poll_interval_s" in concurrency:
        run_table["poll_interval_s"] = max(0.1, float(concurrency["poll_interval_s"]))
    run_table.update({k: run.config[k] for k in RUN_KEYS if k in run.config})
    return {
        "workload": {
            "name": f"fit-{run.run_id}",
            "description": (
                f"fitted to run {run.run_id} ({run.name}): {per_episode:.0f} tokens an episode,"
                f" {run.tokens_per_s:.1f} completed-episode tokens/s recorded"
            ),
        },
        "run": run_table,
        "engine": _engine_tables(run.engines, answer),
        "env": fitted_envs,
    }


def _mean_turns(envs: list[Any]) -> float:
    """Turns an episode takes, weighted as the run draws its environments."""
    weights = [float(env.get("weight", 1.0)) for env in envs]
    turns = [_turns(env) for env in envs]
    return sum(w * t for w, t in zip(weights, turns, strict=True)) / sum(weights)


def _turns(env: Mapping[str, Any]) -> int:
    if env.get("name") == "multiturn":
        return int((env.get("args") or {}).get("turns", 4))  # multiturn's own default
    return 1


def _model_decides(env: Mapping[str, Any]) -> bool:
    return env.get("name") not in SHAPED_ENVS or "completion_tokens" not in (env.get("args") or {})


def _fit_env(env: Mapping[str, Any], per_turn: float) -> dict[str, Any]:
    """The config's environment with its completion lengths moved to the measured mean."""
    fitted = json.loads(json.dumps(env))  # a deep copy of plain JSON
    if _model_decides(env):
        return fitted
    fitted["args"]["completion_tokens"] = _rescaled(fitted["args"]["completion_tokens"], per_turn)
    return fitted


def _rescaled(shape: Any, mean: float) -> Any:
    """``shape`` (a number or a distribution table) with mean ``mean``, its spread and clamp
    scaled alike so the tail keeps its form."""
    if not isinstance(shape, dict):
        return round(mean, 1)
    kind = shape.get("kind")
    if kind == "fixed":
        return {**shape, "value": round(mean, 1)}
    if kind == "uniform":
        ratio = mean / ((float(shape["low"]) + float(shape["high"])) / 2)
        return {
            **shape,
            "low": round(shape["low"] * ratio, 1),
            "high": round(shape["high"] * ratio, 1),
        }
    ratio = mean / float(shape["mean"])
    out = {**shape, "mean": round(mean, 1)}
    if "max" in shape:
        out["max"] = round(shape["max"] * ratio, 1)
    return out


def _engine_tables(engines: Sequence[EngineSeen], answer: str | None) -> list[dict[str, Any]]:
    """One ``[[engine]]`` table per distinct engine shape, with its count."""
    tables: list[dict[str, Any]] = []
    for engine in sorted(engines, key=lambda e: e.engine_id):
        table: dict[str, Any] = {"role": engine.role}
        if engine.kv_capacity_tokens:
            table["kv_tokens"] = engine.kv_capacity_tokens
        if engine.max_model_len:
            table["max_model_len"] = engine.max_model_len
        if engine.max_num_seqs:
            table["max_num_seqs"] = engine.max_num_seqs
        if answer is not None:
            table["answer_length"] = answer
        same = next((t for t in tables if {**t, "count": 0} == {**table, "count": 0}), None)
        if same is None:
            tables.append({"count": 1, **table})
        else:
            same["count"] += 1
    return tables


def workload_toml(document: Mapping[str, Any]) -> str:
    """A workload document as TOML: ``[workload]`` and ``[run]`` tables, then arrays of
    tables; anything nested below is written inline, which every TOML reader accepts."""
    lines: list[str] = []
    for key, value in document.items():
        if isinstance(value, list):
            for item in value:
                lines += ["", f"[[{key}]]", *_pairs(item)]
        else:
            lines += ["", f"[{key}]", *_pairs(value)]
    return "\n".join(lines).lstrip("\n") + "\n"


def _pairs(table: Mapping[str, Any]) -> list[str]:
    return [f"{_key(k)} = {_value(v)}" for k, v in table.items()]


def _key(key: str) -> str:
    return key if BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # JSON's escapes are TOML's basic-string escapes; TOML also wants DEL escaped
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")
