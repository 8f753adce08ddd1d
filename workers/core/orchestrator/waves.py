"""Evaluation waves: the groups a wave submits, the decision that announces it, and its
report once every episode of it has ended.

A wave runs the same tasks every time (seeded by environment and index, not by wave), so
waves compare policy versions on equal ground; each of its episodes is a group of one, so
the dispatcher spreads a wave over every engine. Eval episodes share the permit pool with
training and are never shed, so the announcement says whether the wave fits under the cap.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from workers.core.config.run import EnvSettings
from workers.core.decisions import Cause, Decision, DecisionKind, Signal
from workers.core.dispatch.episodes import GroupSpec
from workers.core.dispatch.permits import EpisodeKind
from workers.core.orchestrator.batches import EvalReport
from workers.core.orchestrator.groups import EpisodeSpec, OpenGroup, Wave, wave_rewards


def derive_seed(*parts: object) -> int:
    """A seed from its parts, stable across processes and Python versions."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # < 2**63, as vLLM's seeds must be


def wave_groups(
    envs: Mapping[str, EnvSettings], wave: Wave, *, prefix: str, seed: int
) -> list[tuple[OpenGroup, GroupSpec[EpisodeSpec]]]:
    """Every group of the wave, as the book opens it and as the dispatcher takes it."""
    made = []
    for label, env in envs.items():
        if env.kind is not EpisodeKind.EVAL:
            continue
        for index in range(env.episodes):
            group_id = f"{prefix}eval{wave.number}-{label}-{index}"
            task_seed = derive_seed(seed, "eval", label, index)
            payload = EpisodeSpec(label, task_seed, derive_seed(task_seed, "rollout", wave.number))
            book = OpenGroup(group_id, EpisodeKind.EVAL, label, wave.policy_version, 1, wave.number)
            spec = GroupSpec(group_id, EpisodeKind.EVAL, label, wave.policy_version, (payload,))
            made.append((book, spec))
    return made


def wave_decision(
    wave: Wave, *, cap: int, inflight: int, signal: Signal, now: float, again: bool = False
) -> Decision:
    """The record that puts a wave on the run's timeline (``again``: a wave left unfinished
    before a restart, run again); an alert when it cannot fit."""
    fits = wave.expected <= cap
    note = (
        "eval episodes are never shed"
        if fits
        else "it does not fit under the cap at once and runs as slots free up"
    )
    return Decision(
        at=now,
        kind=DecisionKind.EVAL_WAVE,
        cause=Cause.EVAL,
        signal=signal,
        cap_before=cap,
        cap_after=cap,
        reason=(
            f"Eval wave {wave.number} after step {wave.after_step}"
            f"{' (again: unfinished when the run was stopped)' if again else ''}: "
            f"{wave.expected} episodes "
            f"share the cap {cap} with training; {note}"
        ),
        alert=not fits,
        figures={"episodes": wave.expected, "inflight": inflight},
    )


def wave_report(wave: Wave, *, now: float) -> EvalReport:
    return EvalReport(
        wave=wave.number,
        after_step=wave.after_step,
        policy_version=wave.policy_version,
        started_at=wave.started_at,
        finished_at=now,
        episodes={env: len(rewards) for env, rewards in wave.rewards.items()},
        failed=dict(wave.failed),
        reward_mean=wave_rewards(wave),
    )
