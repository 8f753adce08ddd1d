"""The orchestrator on engines of words: groups in, whole scored batches out, one step at a
time; the trainer's acknowledgements; evaluation waves in the shared pool."""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.model_folders import model_folder
from tests.unit.orchestrator.fakes import WordEngine, healthy
from workers.core.clock import MonotonicClock
from workers.core.config.run import RunConfig, parse_run_config
from workers.core.decisions import Decision, DecisionKind
from workers.core.orchestrator.batches import (
    Batch,
    EvalReport,
    StepReport,
    WaveStart,
    group_advantages,
)
from workers.core.orchestrator.orchestrator import OpenWave, Orchestrator, RunOutcome, StartPoint
from workers.core.orchestrator.ports import Ack
from workers.runtime.acks import FileAcks

ENGINES = ("e0", "e1")


class MemoryWriter:
    def __init__(self, written: set[int] | None = None) -> None:
        self.batches: list[Batch] = []
        self.reports: list[StepReport] = []  # as written with each batch
        self.existing = written or set()

    def written_steps(self) -> set[int]:
        return set(self.existing)

    def write(self, batch: Batch, report: StepReport) -> None:
        assert batch.step not in self.existing, "a written step is never written again"
        self.existing.add(batch.step)
        self.batches.append(batch)
        self.reports.append(report)

    def path_of(self, step: int) -> str:
        return f"memory://{step}"


class Acks:
    def __init__(self) -> None:
        self.acks: dict[int, asyncio.Future[Ack]] = {}

    def future(self, step: int) -> asyncio.Future[Ack]:
        return self.acks.setdefault(step, asyncio.get_running_loop().create_future())

    async def wait(self, step: int) -> Ack:
        return await self.future(step)


def config(**top: Any) -> RunConfig:
    document: dict[str, Any] = {
        "name": "t",
        "batch_size": 8,
        "group_size": 4,
        "max_steps": 3,
        "concurrency": {
            "initial_inflight": 16,
            "max_inflight": 32,
            "poll_interval_s": 0.05,
            "pacing": {"window": 0.05},  # failures pay for their replacements: keep it short
        },
        "env": [{"name": "multiturn", "args": {"turns": 2, "words": 4}}],
        "engine": [{"url": f"http://{name}:8000"} for name in ENGINES],
    }
    document.update(top)
    return parse_run_config(document)


class Recorder:
    """Reporter that keeps what it hears (a class with a ``decisions`` attribute would clash
    with the method)."""

    def __init__(self) -> None:
        self.heard: list[Decision] = []
        self.steps: list[StepReport] = []
        self.evals: list[EvalReport] = []
        self.started: list[WaveStart] = []

    def decisions(self, decisions: tuple[Decision, ...]) -> None:
        self.heard.extend(decisions)

    def step(self, report: StepReport) -> None:
        self.steps.append(report)

    def eval_started(self, start: WaveStart) -> None:
        self.started.append(start)

    def eval(self, report: EvalReport) -> None:
        self.evals.append(report)


def orchestrator(
    cfg: RunConfig, writer: MemoryWriter, reporter: Recorder, **kwargs: Any
) -> Orchestrator:
    engines = kwargs.pop("engines", None) or {name: WordEngine(words=3) for name in ENGINES}
    return Orchestrator(
        cfg,
        controller=cfg.concurrency.make_controller(),
        poll=healthy(list(engines)),
        engines=engines,
        clock=MonotonicClock(),
        writer=writer,
        reporter=reporter,
        **kwargs,
    )


async def test_a_run_writes_max_steps_batches_of_whole_scored_groups() -> None:
    cfg = config()
    writer, heard = MemoryWriter(), Recorder()
    result = await orchestrator(cfg, writer, heard).run()
    assert (result.outcome, result.step, result.policy_version) == (RunOutcome.COMPLETED, 3, 3)
    assert [b.step for b in writer.batches] == [1, 2, 3]
    for batch in writer.batches:
        assert len(batch.samples) == cfg.batch_size
        groups = Counter(s.group_id for s in batch.samples)
        assert set(groups.values()) == {cfg.group_size}  # whole groups only
        for group_id in groups:
            members = sorted(
                (s for s in batch.samples if s.group_id == group_id), key=lambda s: s.index
            )
            assert [s.index for s in members] == list(range(cfg.group_size))
            advantages = [s.advantage for s in members]
            assert advantages == pytest.approx(
                group_advantages([s.episode.reward for s in members])
            )
            assert math.fsum(advantages) == pytest.approx(0.0, abs=1e-9)
        assert {s.policy_version for s in batch.samples} <= set(range(batch.step))
        assert {s.engine for s in batch.samples} <= set(ENGINES)
    assert [r.step for r in heard.steps] == [1, 2, 3]
    assert writer.reports == heard.steps  # each step's files carry its report
    assert [r.path for r in heard.steps] == ["memory://1", "memory://2", "memory://3"]
    assert all(r.episodes == 8 and r.cap <= 32 for r in heard.steps)
    assert heard.heard and heard.heard[0].kind is DecisionKind.BOOTSTRAP


async def test_a_group_that_loses_a_member_is_dropped_whole() -> None:
    failing = WordEngine(words=3, fail=lambda turn: turn.seed is not None and turn.seed % 5 == 0)
    engines = {"e0": failing, "e1": WordEngine(words=3)}
    writer, heard = MemoryWriter(), Recorder()
    result = await orchestrator(config(), writer, heard, engines=engines).run()
    assert result.outcome is RunOutcome.COMPLETED
    assert sum(r.failed for r in heard.steps) > 0
    assert sum(r.dropped_groups for r in heard.steps) > 0
    for batch in writer.batches:
        assert set(Counter(s.group_id for s in batch.samples).values()) == {4}


async def test_with_an_external_trainer_no_step_is_written_before_the_last_is_acknowledged() -> (
    None
):
    cfg = config(trainer={"mode": "external", "ack_timeout_s": 5.0})
    writer, heard, acks = MemoryWriter(), Recorder(), Acks()
    orch = orchestrator(cfg, writer, heard, acks=acks)
    run = asyncio.ensure_future(orch.run())
    while not writer.batches:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    assert [b.step for b in writer.batches] == [1]  # waiting for the trainer
    assert orch.checkpoint is None  # the engines' own weights until a trainer sends some
    acks.future(1).set_result(Ack(7, "/ckpt/7"))
    acks.future(2).set_result(Ack(8, "/ckpt/8"))
    acks.future(3).set_result(Ack(9, "/ckpt/9"))
    result = await run
    assert (result.outcome, result.policy_version) == (RunOutcome.COMPLETED, 9)
    assert [b.policy_version for b in writer.batches] == [0, 7, 8]
    assert orch.checkpoint == "/ckpt/9"  # the acknowledged weights, for the engines to serve


async def test_a_missed_acknowledgement_fails_the_run_with_that_reason() -> None:
    cfg = config(trainer={"mode": "external", "ack_timeout_s": 0.3})
    writer = MemoryWriter()
    result = await orchestrator(cfg, writer, Recorder(), acks=Acks()).run()
    assert result.outcome is RunOutcome.FAILED
    assert result.reason == "the trainer did not acknowledge step 1 within 0.3 s"
    assert [b.step for b in writer.batches] == [1]


async def test_the_file_form_carries_checkpoints_and_a_bad_one_fails_the_run_saying_why(
    tmp_path: Path,
) -> None:
    """``<output>/acks/N`` as a trainer outside the control plane writes it: step 1's
    checkpoint is taken; step 2's names a folder that is not there, so the run ends on the
    version and weights it had, with the reason."""
    cfg = config(trainer={"mode": "external", "ack_timeout_s": 5.0})
    writer, folder = MemoryWriter(), model_folder(tmp_path / "ckpt" / "v1")
    acks = FileAcks(tmp_path / "acks", MonotonicClock(), checkpoints=tmp_path)
    (acks.folder / "1").write_text(json.dumps({"policy_version": 1, "checkpoint": "ckpt/v1"}))
    (acks.folder / "2").write_text(json.dumps({"policy_version": 2, "checkpoint": "ckpt/v2"}))
    orch = orchestrator(cfg, writer, Recorder(), acks=acks)
    result = await orch.run()
    assert result.outcome is RunOutcome.FAILED
    assert result.reason == (
        f"the acknowledgement in {acks.folder / '2'} is refused: "
        "checkpoint 'ckpt/v2' does not exist"
    )
    assert (result.policy_version, orch.checkpoint) == (1, str(folder.resolve()))
    assert [b.step for b in writer.batches] == [1, 2]


async def test_eval_waves_share_the_pool_and_are_reported_per_kind() -> None:
    cfg = config(
        max_steps=4,
        eval_every=2,
        env=[
            {"name": "multiturn", "args": {"turns": 2}},
            {"name": "arithmetic", "kind": "eval", "episodes": 6},
        ],
    )
    writer, heard = MemoryWriter(), Recorder()
    await orchestrator(cfg, writer, heard).run()
    waves = [d for d in heard.heard if d.kind is DecisionKind.EVAL_WAVE]
    assert [d.figures["episodes"] for d in waves] == [6, 6]
    assert "share the cap" in waves[0].reason and not waves[0].alert
    assert [(e.wave, e.after_step) for e in heard.evals] == [(1, 2), (2, 4)]  # the last too
    assert [(w.wave, w.after_step) for w in heard.started] == [(1, 2), (2, 4)]
    assert all(e.episodes == {"arithmetic": 6} for e in heard.evals)
    # Eval episodes are counted in the next step's report: all of the first wave's, when it
    # finished before the last step was written (on the real clock it may finish after).
    if heard.evals[0].finished_at < heard.steps[-1].written_at:
        assert sum(r.finished_eval for r in heard.steps) >= 6
    assert all(s.env == "multiturn" for b in writer.batches for s in b.samples)


async def test_a_restored_run_runs_its_unfinished_waves_again_the_final_one_too() -> None:
    cfg = config(
        max_steps=4,
        eval_every=2,
        env=[
            {"name": "multiturn", "args": {"turns": 2}},
            {"name": "arithmetic", "kind": "eval", "episodes": 6},
        ],
    )
    writer, heard = MemoryWriter(written={1, 2, 3, 4}), Recorder()
    # The stored count lags the wave its record shows started (the host died in between).
    start = StartPoint(4, 4, waves=1, open_waves=(OpenWave(2, after_step=4, policy_version=4),))
    orch = orchestrator(cfg, writer, heard, start=start)
    result = await orch.run()
    assert (result.outcome, result.step, orch.waves) == (RunOutcome.COMPLETED, 4, 2)
    assert writer.batches == []  # every step was written before
    assert [(e.wave, e.after_step, e.policy_version) for e in heard.evals] == [(2, 4, 4)]
    assert heard.evals[0].episodes == {"arithmetic": 6}
    (announced,) = [d for d in heard.heard if d.kind is DecisionKind.EVAL_WAVE]
    assert announced.reason.startswith("Eval wave 2 after step 4 (again:")


async def test_stop_leaves_only_whole_steps_and_says_why() -> None:
    cfg = config(max_steps=1000)
    writer, heard = MemoryWriter(), Recorder()
    orch = orchestrator(cfg, writer, heard)
    run = asyncio.ensure_future(orch.run())
    while len(writer.batches) < 2:
        await asyncio.sleep(0.01)
    orch.stop("operator stop")
    result = await run
    assert (result.outcome, result.reason) == (RunOutcome.STOPPED, "operator stop")
    assert result.step == len(writer.batches)
    assert orch.loop.dispatcher.inflight == 0


async def test_a_resumed_run_continues_after_the_last_written_step() -> None:
    writer = MemoryWriter(written={1, 2})
    result = await orchestrator(
        config(max_steps=4), writer, Recorder(), start=StartPoint(1, 1)
    ).run()
    assert [b.step for b in writer.batches] == [3, 4]
    assert result.step == 4
