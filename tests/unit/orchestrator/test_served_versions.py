"""Versions that are true: each turn is tagged with the version its engine served (the
relay's record), a batch carries them, the off-policy bound reads them, and the controller is
told which engine is paused for an update."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from tests.unit.orchestrator.fakes import WordEngine, healthy
from tests.unit.orchestrator.test_orchestrator import Acks, MemoryWriter, Recorder, config
from workers.core.clock import MonotonicClock
from workers.core.controller.concurrency import Controller
from workers.core.controller.records import ControllerStats, EpisodeCompletion
from workers.core.decisions import Decision, DecisionKind
from workers.core.environments.base import Sampling, Session
from workers.core.orchestrator.orchestrator import Orchestrator, RunOutcome
from workers.core.orchestrator.ports import Ack
from workers.core.samples import LoadSample
from workers.core.turns import Turn, TurnResult

RELOAD_S = 0.15
ENGINES = ("e0", "e1")


class Weights:
    """One engine's weight routes: a reload takes RELOAD_S of real time."""

    def __init__(self) -> None:
        self.version: int | None = None

    async def pause(self) -> None: ...

    async def reload(self, checkpoint: str) -> None:
        await asyncio.sleep(RELOAD_S)

    async def set_version(self, version: int) -> None:
        self.version = version

    async def resume(self) -> None: ...

    async def served_version(self) -> int | None:
        return self.version

    async def is_paused(self) -> bool:
        return False


class Watching:
    """The real controller, with every poll it is given kept."""

    def __init__(self, inner: Controller) -> None:
        self.inner = inner
        self.polls: list[tuple[LoadSample, ...]] = []

    @property
    def cap(self) -> int:
        return self.inner.cap

    def on_poll(
        self, samples: Sequence[LoadSample], *, inflight: int, now: float
    ) -> tuple[Decision, ...]:
        self.polls.append(tuple(samples))
        return self.inner.on_poll(samples, inflight=inflight, now=now)

    def on_completion(self, completion: EpisodeCompletion, *, now: float) -> tuple[Decision, ...]:
        return self.inner.on_completion(completion, now=now)

    def make_stats(self, now: float) -> ControllerStats:
        return self.inner.make_stats(now)


async def acknowledge_each(acks: Acks, writer: MemoryWriter, steps: int) -> None:
    """The trainer: each step acknowledged with a new version and its weights."""
    for step in range(1, steps + 1):
        while len(writer.batches) < step:
            await asyncio.sleep(0.01)
        acks.future(step).set_result(Ack(step, f"/ckpt/v{step}"))


async def hosted(bound: int, mode: str = "rolling") -> tuple[Any, MemoryWriter, Recorder, Watching]:
    cfg = config(
        max_steps=4,
        max_off_policy_steps=bound,
        trainer={"mode": "external", "ack_timeout_s": 10.0, "updates": mode},
    )
    writer, heard, acks = MemoryWriter(), Recorder(), Acks()
    controller = Watching(cfg.concurrency.make_controller())
    weights = {name: Weights() for name in ENGINES}
    orch = Orchestrator(
        cfg,
        controller=controller,
        poll=healthy(list(ENGINES)),
        engines={name: WordEngine(words=3) for name in ENGINES},
        clock=MonotonicClock(),
        writer=writer,
        acks=acks,
        reporter=heard,
        weights=weights,
    )
    trainer = asyncio.ensure_future(acknowledge_each(acks, writer, 4))
    result = await orch.run()
    await trainer
    assert all(w.version == 4 for w in weights.values())
    return result, writer, heard, controller


async def test_rolling_updates_tag_each_turn_and_a_batch_holds_samples_a_version_behind() -> None:
    result, writer, heard, _ = await hosted(bound=8)
    assert result.outcome is RunOutcome.COMPLETED
    behind = 0
    for batch in writer.batches:
        for sample in batch.samples:
            versions = sample.episode.turn_versions
            assert len(versions) == sample.episode.turns == 2
            assert sample.sampled_version == min(versions) <= batch.policy_version
            behind += sample.sampled_version < batch.policy_version
    assert behind > 0  # generation runs ahead of the trainer: part of a batch is older
    reports = {r.step: r.sampled_versions for r in heard.steps}
    for batch in writer.batches:
        counted = {}
        for sample in batch.samples:
            key = str(sample.sampled_version)
            counted[key] = counted.get(key, 0) + 1
        assert reports[batch.step] == counted


async def test_no_sample_is_kept_further_behind_than_the_bound_on_served_versions() -> None:
    result, writer, heard, _ = await hosted(bound=0)
    assert result.outcome is RunOutcome.COMPLETED
    for batch in writer.batches:
        assert all(s.sampled_version >= batch.policy_version for s in batch.samples)
    assert sum(r.dropped_groups for r in heard.steps) > 0  # the bound had work to do


async def test_the_controller_is_told_which_engine_is_updating_and_never_freezes() -> None:
    _, _, heard, controller = await hosted(bound=8)
    marked = [{s.engine_id for s in poll if s.updating} for poll in controller.polls]
    # Rolling: one engine paused at a time (the one before it may still settle meanwhile).
    assert {"e0"} in marked and {"e1"} in marked and set() in marked
    kinds = {d.kind for d in heard.heard}
    assert DecisionKind.STALE_FREEZE not in kinds
    assert sum(d.kind is DecisionKind.WEIGHTS for d in heard.heard) == 2 * 4


class Straddled:
    """An engine whose weights change while a turn is on it."""

    def __init__(self) -> None:
        self.served = 3

    async def tokenize(self, text: str, *, add_special_tokens: bool) -> tuple[int, ...]:
        return (1, 2)

    async def complete(self, turn: Turn) -> TurnResult:
        self.served += 1  # the update lands mid-turn
        return TurnResult(tokens=1, token_ids=(5,), token_logprobs=(-0.1,))


async def test_a_turn_that_straddles_an_update_carries_the_older_version() -> None:
    engine = Straddled()
    session = Session(
        engine, Sampling(), seed=1, clock=MonotonicClock(), version=lambda: engine.served
    )
    await session.prompt("hi")
    await session.generate()
    await session.generate()
    assert session.finish(reward=0.0).turn_versions == (3, 4)


async def test_an_engine_a_poll_finds_restarted_gets_the_current_weights_again() -> None:
    """The poll says e1 restarted (its counters' stamps changed) and its weights are the base
    ones again: it is held out of routing, checked at once, and pushed the current version."""
    cfg = config(max_steps=3, trainer={"mode": "external", "ack_timeout_s": 10.0})
    writer, heard, acks = MemoryWriter(), Recorder(), Acks()
    weights = {name: Weights() for name in ENGINES}
    base = healthy(list(ENGINES))
    restart = asyncio.Event()

    async def poll() -> list[LoadSample]:
        samples = await base()
        if restart.is_set():
            restart.clear()
            weights["e1"].version = None  # what a new process serves
            return [
                s if s.engine_id == "e0" else dataclasses.replace(s, restarted=True)
                for s in samples
            ]
        return samples

    orch = Orchestrator(
        cfg,
        controller=cfg.concurrency.make_controller(),
        poll=poll,
        engines={name: WordEngine(words=3) for name in ENGINES},
        clock=MonotonicClock(),
        writer=writer,
        acks=acks,
        reporter=heard,
        weights=weights,
    )
    run = asyncio.ensure_future(orch.run())
    while not writer.batches:
        await asyncio.sleep(0.01)
    acks.future(1).set_result(Ack(1, "/ckpt/v1"))
    while not any(d.kind is DecisionKind.WEIGHTS for d in heard.heard):
        await asyncio.sleep(0.01)
    restart.set()
    while not any("came back on its base weights" in d.reason for d in heard.heard):
        await asyncio.sleep(0.01)
    assert weights["e1"].version == 1
    acks.future(2).set_result(Ack(2, "/ckpt/v2"))
    acks.future(3).set_result(Ack(3, "/ckpt/v3"))
    assert (await run).outcome is RunOutcome.COMPLETED
    (again,) = [d for d in heard.heard if "came back" in d.reason]
    assert again.reason.startswith("e1 came back on its base weights: version 1 pushed again after")
    assert all(w.version == 3 for w in weights.values())
