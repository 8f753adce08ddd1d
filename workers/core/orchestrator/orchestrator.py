"""The orchestrator: keeps the dispatcher fed with groups from the environments, turns
finished groups into training batches, one step at a time, and runs evaluation waves in the
same pool of permits.

It drives the control loop that already sizes the cap: the loop polls the engines and feeds
the controller; the orchestrator submits groups (``group_size`` rollouts of one task, routed
together), scores whole groups (group-normalised advantages), writes a step once
``batch_size`` episodes are ready, and moves the policy version on: at once when no trainer
is attached (``trainer.mode = "none"``), or when the trainer acknowledges the step
(``external``, within ``ack_timeout_s``). Generation runs ahead of the trainer by at most two
batches; the dispatcher drops groups that fall more than ``max_off_policy_steps`` versions
behind, and no scored group is kept whose oldest turn was sampled further behind than that
(on the version its engine served, the relay's record, which every turn is tagged with).

With weights relayed (a trainer sending checkpoints), the relay brings the engines to each
acknowledged version and a version watch (``versions.py``) keeps the record of what each
serves true between updates and tells the controller which engines are paused for one.

Everything it touches is injected: the controller and the engine poll (through the control
loop), one engine client per engine, the clock, the batch writer, the trainer's
acknowledgements and the reporter. So the same run goes in a Celery task, in a test and in
virtual time.

    orchestrator = Orchestrator(config, controller=ctl, poll=monitor_poll, engines=clients,
                                clock=MonotonicClock(), writer=writer)
    result = await orchestrator.run()   # until max_steps, stop(), or a failure
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from workers.core.clock import Clock
from workers.core.config.run import EnvSettings, RunConfig
from workers.core.control_loop import ControlLoop, Poll, Steering
from workers.core.decisions import Decision, Signal
from workers.core.dispatch.episodes import EpisodeTicket, FinishedEpisode, GroupSpec
from workers.core.dispatch.permits import EpisodeKind
from workers.core.environments.base import EngineClient, Episode, Session
from workers.core.orchestrator.batches import Batch, WaveStart
from workers.core.orchestrator.footprint import KvFootprint
from workers.core.orchestrator.groups import EpisodeSpec, GroupBook, OpenGroup, Wave
from workers.core.orchestrator.ports import (
    Ack,
    Acknowledgements,
    BatchWriter,
    QuietReporter,
    RunReporter,
)
from workers.core.orchestrator.relay import EngineWeights, Relay, UpdateMode
from workers.core.orchestrator.steps import StepTally
from workers.core.orchestrator.trainer import RunFailed, acknowledged
from workers.core.orchestrator.versions import VersionWatch
from workers.core.orchestrator.waves import derive_seed, wave_decision, wave_groups, wave_report
from workers.core.samples import LoadSample

logger = logging.getLogger(__name__)

BATCHES_AHEAD = 2  # ready episodes beyond this many batches stop new groups: bounded memory


class RunOutcome(StrEnum):
    COMPLETED = "completed"  # every step was written (and acknowledged, with a trainer)
    STOPPED = "stopped"  # stop() was called; only whole steps were written
    FAILED = "failed"  # the run cannot go on; the reason says why


@dataclass(frozen=True, slots=True)
class OpenWave:
    """An evaluation wave started before a restart that never finished."""

    number: int
    after_step: int
    policy_version: int


@dataclass(frozen=True, slots=True)
class StartPoint:
    """Where a run begins: from scratch, or where a stored run left off."""

    step: int = 0  # the last step written
    policy_version: int = 0
    waves: int = 0  # evaluation waves already started
    acknowledged: bool = True  # False: the trainer has yet to acknowledge ``step``
    # Waves started and not finished (the host stopped or died first): run again, whole, as
    # the run starts, so every wave started ends with a record (the final one included).
    open_waves: tuple[OpenWave, ...] = ()
    checkpoint: str | None = None  # the weights of ``policy_version``, if a trainer sent them


@dataclass(frozen=True, slots=True)
class RunResult:
    outcome: RunOutcome
    reason: str
    step: int  # the last step written
    policy_version: int


class Orchestrator:
    def __init__(
        self,
        config: RunConfig,
        *,
        controller: Steering,
        poll: Poll,
        engines: Mapping[str, EngineClient],
        clock: Clock,
        writer: BatchWriter,
        acks: Acknowledgements | None = None,
        reporter: RunReporter | None = None,
        max_model_len: Callable[[str], int | None] = lambda engine: None,
        start: StartPoint | None = None,
        on_episode: Callable[[FinishedEpisode[EpisodeSpec, Episode]], None] | None = None,
        weights: Mapping[str, EngineWeights] | None = None,
        on_engine_left: Callable[[str], None] | None = None,
    ) -> None:
        if config.trainer.mode == "external" and acks is None:
            raise ValueError("trainer mode 'external' needs a source of acknowledgements")
        start = start or StartPoint()
        self._start = start
        self.config = config
        self._clock = clock
        self._writer = writer
        self._acks = acks
        self._reporter = reporter or QuietReporter()
        self._on_episode = on_episode  # every episode that left the pool, for benchmarks
        self._on_engine_left = on_engine_left  # the runtime drops what it kept for the engine
        self._engines = dict(engines)
        self._max_model_len = max_model_len
        self._envs = _labelled(config.envs)
        self._train = [
            (label, env) for label, env in self._envs.items() if env.kind is EpisodeKind.TRAIN
        ]
        self._poll = poll
        self._loop: ControlLoop[EpisodeSpec, Episode] = ControlLoop(
            controller=controller,
            poll=self._polled,
            run_episode=self._run_episode,
            clock=clock,
            engines=list(self._engines),
            config=config.concurrency.loop,
            dispatcher_config=config.dispatcher,
            on_finished=self._finished,
            on_decisions=self._decided,
            on_failed=self._fail,
            on_left=self._engine_left,
        )
        self._versions = (
            None
            if weights is None
            else VersionWatch(
                Relay(
                    dict(weights),
                    clock,
                    mode=UpdateMode(config.trainer.updates),
                    routing=self._loop.dispatcher,
                    loop_state=self._loop_state,
                ),
                engines=list(self._engines),
                routing=self._loop.dispatcher,
                clock=clock,
                on_decisions=self._reporter.decisions,
            )
        )
        if self._versions is not None and start.checkpoint is not None:
            self._versions.relay.target = (start.policy_version, start.checkpoint)
        self._book = GroupBook()
        self._step = start.step
        self._version = start.policy_version
        self._checkpoint = start.checkpoint
        # The stored count may lag a wave started just before the host died: its record says.
        self._waves = max([start.waves, *(wave.number for wave in start.open_waves)])
        self._groups = 0
        self._prefix = f"s{start.step}-"  # group ids stay unique across resumed runs
        self._accepting = False
        self._stop_reason: str | None = None
        self._failure: str | None = None  # why the run cannot go on (no engine usable)
        self._changed = asyncio.Event()
        self._tally = StepTally(clock.now())
        self.footprint = KvFootprint()  # what one episode holds of the KV cache, for a pool

    @property
    def loop(self) -> ControlLoop[EpisodeSpec, Episode]:
        """The control loop, for operator commands and its decisions."""
        return self._loop

    @property
    def step(self) -> int:
        return self._step

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def checkpoint(self) -> str | None:
        """The folder of the current policy version's weights, as the trainer's
        acknowledgement named it: what the engines are to serve. None for their own weights
        (no trainer, or one that sends no weights back)."""
        return self._checkpoint

    def weights_by_engine(self) -> dict[str, tuple[int | None, bool]] | None:
        """Each engine's served version on the relay's record (None until the run knows it)
        and whether it is updating now; None when the run relays no weights."""
        return None if self._versions is None else self._versions.by_engine()

    @property
    def waves(self) -> int:
        """Evaluation waves started so far."""
        return self._waves

    def start_eval_wave(self) -> None:
        """An evaluation wave now, outside the ``eval_every`` rhythm (an operator's, or a
        benchmark's timed event); needs an eval environment."""
        if not any(env.kind is EpisodeKind.EVAL for env in self._envs.values()):
            raise ValueError("the run has no eval environment to run a wave of")
        self._start_wave()

    @property
    def hungry(self) -> bool:
        """Whether the run would take more episodes now: it is not stopping and not held
        back by a trainer that has ``BATCHES_AHEAD`` batches waiting already. What a pool of
        shared engines lends a share away on (``workers.core.sharing``)."""
        if self._stop_reason is not None:
            return False
        return self._book.ready_episodes < BATCHES_AHEAD * self.config.batch_size

    def add_engine(
        self, name: str, client: EngineClient, weights: EngineWeights | None = None
    ) -> Decision:
        """An engine joins the running run (an operator's command): new groups go to it at
        once, or, when the run relays weights, once the version check has brought it to the
        run's version. ValueError when it is in the run already, or when its weight routes are
        missing (or given) against the run's trainer. The decision is the caller's to apply
        (``loop.command``), once linked to its command."""
        versions = self._versions
        if (weights is None) != (versions is None):
            needs = "needs its weight routes" if weights is None else "relays no weights"
            raise ValueError(f"engine {name}: the run {needs}")
        if versions is not None:
            self._loop.dispatcher.hold(name)  # before routing can reach it
        try:
            decision = self._loop.add_engine(name)
        except ValueError:
            if versions is not None and name not in self._loop.engines:
                self._loop.dispatcher.release(name)
            raise
        self._engines[name] = client
        if versions is not None and weights is not None:
            versions.add(name, weights)
        return decision

    def remove_engine(self, name: str, drain_s: float) -> Decision:
        """An engine leaves the running run: it drains (``ControlLoop.drain_engine``), then
        its client goes. ValueError for an engine not in the run, or its last."""
        return self._loop.drain_engine(name, drain_s)

    def _engine_left(self, name: str) -> None:
        self._engines.pop(name, None)
        if self._versions is not None:
            self._versions.remove(name)
        if self._on_engine_left is not None:
            self._on_engine_left(name)

    def stop(self, reason: str = "stopped") -> None:
        """End the run after the step being written, if one is; nothing half written."""
        if self._stop_reason is None:
            self._stop_reason = reason
        self._changed.set()

    async def run(self) -> RunResult:
        """Until ``max_steps`` steps are written, ``stop()``, or a failure; every episode in
        flight is cancelled on the way out (their engine requests aborted)."""
        written = self._writer.written_steps()
        self._step = max(self._step, max(written, default=0))
        self._tally = StepTally(self._clock.now())
        versions = self._versions
        checking = None if versions is None else asyncio.ensure_future(versions.watch())
        try:
            async with self._loop:
                self._accepting = True
                try:
                    for wave in self._start.open_waves:
                        self._start_wave(wave)
                    self._top_up()
                    outcome, reason = await self._steps()
                finally:  # a run cancelled (abandoned by its host) submits nothing either
                    self._accepting = False
        except RunFailed as failed:
            return RunResult(RunOutcome.FAILED, str(failed), self._step, self._version)
        finally:
            if checking is not None:
                checking.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await checking
        return RunResult(outcome, reason, self._step, self._version)

    # -- steps -----------------------------------------------------------------------------

    async def _steps(self) -> tuple[RunOutcome, str]:
        config = self.config
        if not self._start.acknowledged and config.trainer.mode == "external" and self._step:
            ack = await self._acknowledged(self._step)  # written before a restart
            if ack is None:
                return RunOutcome.STOPPED, self._stop_reason or "stopped"
            await self._serve(ack)
            self._advance(ack)
        while self._step < config.max_steps:
            if not await self._until(lambda: self._book.ready_episodes >= config.batch_size):
                return RunOutcome.STOPPED, self._stop_reason or "stopped"
            await self._write_step(self._step + 1)
            if config.trainer.mode == "external":
                ack = await self._acknowledged(self._step)
                if ack is None:
                    return RunOutcome.STOPPED, self._stop_reason or "stopped"
            else:
                ack = Ack(self._step)
            await self._serve(ack)
            self._advance(ack)
            if config.eval_every and self._step % config.eval_every == 0:
                self._start_wave()
            self._top_up()
        await self._finish_waves()
        return RunOutcome.COMPLETED, f"{self._step} steps written"

    async def _write_step(self, step: int) -> None:
        """The step's report is made as its batch is assembled, before its files, and goes
        into the step's folder with them: a run killed between the files and the record
        rebuilds the record from it. So ``written_at`` is when the batch was complete; the
        time its files take counts into the next step's ``seconds``."""
        samples = self._book.take(self.config.batch_size)
        now = self._clock.now()
        tally, self._tally = self._tally, StepTally(now)
        dispatcher = self._loop.dispatcher
        report = tally.report(
            step=step,
            written_at=now,
            policy_version=self._version,
            samples=samples,
            cap=dispatcher.cap,
            inflight=dispatcher.inflight,
            path=self._writer.path_of(step),
        )
        await asyncio.to_thread(
            self._writer.write, Batch(step, self._version, tuple(samples)), report
        )
        self._step = step
        if tally.failed:
            logger.warning(
                "step %d: %d episodes failed; the last: %s", step, tally.failed, tally.last_error
            )
        self._reporter.step(report)

    async def _acknowledged(self, step: int) -> Ack | None:
        """The trainer's acknowledgement of ``step``; None when stopped while waiting."""
        assert self._acks is not None
        return await acknowledged(
            self._acks,
            step,
            timeout=self.config.trainer.ack_timeout_s,
            clock=self._clock,
            stopped=self._stopped,
            current_version=self._version,
        )

    async def _stopped(self) -> None:
        while self._stop_reason is None:
            self._changed.clear()
            await self._changed.wait()

    async def _serve(self, ack: Ack) -> None:
        """Bring the engines to the acknowledged weights, when the trainer sent new ones and
        the run can reach its engines' weight routes; the groups sampled meanwhile are judged
        by the off-policy bound as the version then advances."""
        versions = self._versions
        if versions is None or ack.checkpoint is None or ack.checkpoint == self._checkpoint:
            return
        self._reporter.decisions(await versions.relay.update(ack.version, ack.checkpoint))

    def _loop_state(self) -> tuple[int, Signal]:
        """The cap and the engines' reading now, for the relay's decisions."""
        now = self._clock.now()
        return self._loop.dispatcher.cap, self._loop.controller.make_stats(now).signal

    def _advance(self, ack: Ack) -> None:
        self._version, self._checkpoint = ack.version, ack.checkpoint
        dropped = self._loop.dispatcher.advance_policy(ack.version)
        self._book.forget(dropped)
        self._tally.dropped_groups += len(dropped) + len(self._drop_behind())

    def _drop_behind(self) -> list[str]:
        """Scored groups whose oldest turn is further behind the policy than the bound."""
        oldest = self._version - self.config.dispatcher.max_off_policy_steps
        return self._book.drop_behind(oldest)

    def _served(self, engine: str, dispatched: int) -> int:
        """The version a turn on ``engine`` is tagged with (see ``VersionWatch.served``)."""
        return dispatched if self._versions is None else self._versions.served(engine, dispatched)

    async def _polled(self) -> Sequence[LoadSample]:
        samples = await self._poll()
        return samples if self._versions is None else self._versions.mark(samples)

    def _fail(self, reason: str) -> None:
        """The control loop's word that the run cannot go on: the wait for the next batch
        (or the last evaluation waves) ends in RunFailed with ``reason``."""
        self._failure = reason
        self._changed.set()

    async def _until(self, condition: Callable[[], bool]) -> bool:
        """Wait until ``condition`` holds; False when stopped first, RunFailed when the run
        cannot go on."""
        while not condition():
            if self._failure is not None:
                raise RunFailed(self._failure)
            if self._stop_reason is not None:
                return False
            self._changed.clear()
            await self._changed.wait()
        return self._stop_reason is None

    # -- feeding the dispatcher ------------------------------------------------------------

    def _top_up(self) -> None:
        """Queue train groups until the dispatcher could fill its free room and one group
        more, unless enough finished episodes wait for the trainer already."""
        if not self._accepting or self._stop_reason is not None:
            return
        if self._book.ready_episodes >= BATCHES_AHEAD * self.config.batch_size:
            return
        dispatcher = self._loop.dispatcher
        wanted = dispatcher.cap - dispatcher.inflight + self.config.group_size
        while dispatcher.pending < wanted:
            self._submit_train_group()

    def _submit_train_group(self) -> None:
        self._groups += 1
        group_id = f"{self._prefix}{self._groups}"
        label = self._pick_env(group_id)
        task_seed = derive_seed(self.config.seed, "task", group_id)
        payloads = tuple(
            EpisodeSpec(label, task_seed, derive_seed(self.config.seed, "rollout", group_id, index))
            for index in range(self.config.group_size)
        )
        self._book.open(
            OpenGroup(group_id, EpisodeKind.TRAIN, label, self._version, self.config.group_size)
        )
        spec = GroupSpec(group_id, EpisodeKind.TRAIN, label, self._version, payloads)
        self._loop.dispatcher.submit(spec)

    def _pick_env(self, group_id: str) -> str:
        """A train environment's label, drawn by weight, the same for a group id every time."""
        if len(self._train) == 1:
            return self._train[0][0]
        total = sum(env.weight for _, env in self._train)
        point = (derive_seed(self.config.seed, "env", group_id) % 1_000_000) / 1_000_000 * total
        for label, env in self._train:
            point -= env.weight
            if point < 0:
                return label
        return self._train[-1][0]

    def _start_wave(self, again: OpenWave | None = None) -> None:
        """A new wave, or ``again`` (a wave left unfinished before a restart) from its start:
        its episodes' results died with the host that ran them, so all of them run again,
        under its number, for the checkpoint it was started for."""
        now = self._clock.now()
        if again is None:
            self._waves += 1
            wave = Wave(self._waves, self._step, self._version, now, expected=0)
        else:
            wave = Wave(again.number, again.after_step, again.policy_version, now, expected=0)
        self._book.waves[wave.number] = wave
        for book, spec in wave_groups(self._envs, wave, prefix=self._prefix, seed=self.config.seed):
            self._book.open(book)
            self._loop.dispatcher.submit(spec)
            wave.expected += 1
        self._reporter.eval_started(
            WaveStart(wave.number, wave.after_step, wave.policy_version, now)
        )
        dispatcher = self._loop.dispatcher
        signal = self._loop.controller.make_stats(now).signal
        self._loop.command(
            wave_decision(
                wave,
                cap=dispatcher.cap,
                inflight=dispatcher.inflight,
                signal=signal,
                now=now,
                again=again is not None,
            )
        )

    async def _finish_waves(self) -> None:
        """After the last step: training is done, so its episodes are cancelled, and the run
        ends once its last evaluation waves have, so the final policy is measured too."""
        if not self._book.waves:
            return
        self._accepting = False
        for group_id in self._book.open_train():
            self._loop.dispatcher.drop(group_id)
        await self._until(lambda: not self._book.waves)

    # -- episodes --------------------------------------------------------------------------

    async def _run_episode(self, ticket: EpisodeTicket[EpisodeSpec], engine_id: str) -> Episode:
        spec = ticket.payload
        env = self._envs[spec.env]
        session = Session(
            self._engines[engine_id],
            env.sampling,
            seed=spec.seed,
            clock=self._clock,
            max_model_len=self._max_model_len(engine_id),
            version=lambda: self._served(engine_id, ticket.policy_version),
            group_size=self.config.group_size if ticket.kind is EpisodeKind.TRAIN else 1,
        )
        return await env.environment.run(session, spec.task_seed)

    def _finished(self, finished: FinishedEpisode[EpisodeSpec, Episode]) -> None:
        tally = self._tally
        tally.count(finished)
        self.footprint.add(finished)
        if self._on_episode is not None:
            self._on_episode(finished)
        ended = self._book.ended(finished)
        if ended.broken_group is not None:
            tally.dropped_groups += 1
            self._loop.dispatcher.drop(ended.broken_group)
        if ended.completed_group:
            self._tally.dropped_groups += len(self._drop_behind())
            self._changed.set()
        if ended.wave is not None:
            self._reporter.eval(wave_report(ended.wave, now=self._clock.now()))
            self._changed.set()
        self._top_up()

    def _decided(self, decisions: tuple[Decision, ...]) -> None:
        if decisions:
            self._reporter.decisions(decisions)
        self._top_up()


def _labelled(envs: tuple[EnvSettings, ...]) -> dict[str, EnvSettings]:
    """Each environment under its name, or ``name#n`` when several share a name."""
    labels: dict[str, EnvSettings] = {}
    for env in envs:
        label, n = env.name, 1
        while label in labels:
            n += 1
            label = f"{env.name}#{n}"
        labels[label] = env
    return labels
