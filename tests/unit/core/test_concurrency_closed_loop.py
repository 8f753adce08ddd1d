"""The controller in a closed loop with a small synthetic engine (not the simulator).

The engine model keeps only what makes a cap right or wrong: a KV cache of fixed size in
tokens, decode speed that falls as the batch grows, admission only when the prompt fits,
preemption of the most recently admitted request when growing contexts overflow the cache
(its outputs are kept but its KV must be prefilled again), and prefill time that eats into
decode time. The knee is the pool whose average context fills the cache.

Run with ``-s`` to see the decision logs.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

import pytest

from workers.core.controller.concurrency import Controller
from workers.core.controller.policies.base import Policy
from workers.core.controller.policies.fixed import FixedPolicy
from workers.core.controller.policies.pacer import PacerConfig, PacerPolicy
from workers.core.controller.policies.reference import ReferencePolicy
from workers.core.controller.records import ControllerConfig, EpisodeCompletion
from workers.core.decisions import Decision, DecisionKind
from workers.core.dispatch.pacing import AdmissionPacer
from workers.core.samples import EngineHealth, EngineRole, LoadSample

KV_TOKENS = 135_000
PROMPT = 300
ANSWER = (100, 500)  # uniform answer length in tokens
KNEE = KV_TOKENS // (PROMPT + sum(ANSWER) // 4)  # average context: prompt + half an answer
STEP_BASE = 0.02  # s per decode step at batch 0
STEP_PER_SEQ = 0.0001  # s per decode step per running sequence
PREFILL_PER_TOKEN = 1e-5  # s per prefilled token
POLL_EVERY = 5  # s
RATE_POLLS = 6  # throughput is judged over 30 s: one poll's token count is noisy
GROUP = 8  # episodes per group: the pacing budget never falls below one group per window


@dataclass(slots=True, eq=False)
class Episode:
    admitted_at: float
    length: int
    generated: float = 0.0
    needs_prefill: bool = True

    @property
    def context(self) -> float:
        return PROMPT + self.generated


@dataclass(slots=True)
class Engine:
    """One unified engine, stepped one simulated second at a time."""

    running: list[Episode] = field(default_factory=list)
    waiting: deque[Episode] = field(default_factory=deque)
    preemptions: int = 0
    generated: float = 0.0

    def step(self) -> list[Episode]:
        used = sum(e.context for e in self.running)
        prefill = 0.0
        while self.waiting and used + self.waiting[0].context <= 0.99 * KV_TOKENS:
            episode = self.waiting.popleft()
            used += episode.context
            prefill += episode.context
            self.running.append(episode)
        decode_time = max(0.0, 1.0 - PREFILL_PER_TOKEN * prefill)
        per_seq = decode_time / (STEP_BASE + STEP_PER_SEQ * len(self.running))
        done = []
        for episode in self.running:
            episode.generated += per_seq
            self.generated += per_seq
            if episode.generated >= episode.length:
                done.append(episode)
        for episode in done:
            self.running.remove(episode)
        used = sum(e.context for e in self.running)
        while used > KV_TOKENS:
            victim = self.running.pop()  # the most recently admitted, as vLLM preempts
            used -= victim.context
            self.waiting.appendleft(victim)
            self.preemptions += 1
        return done

    def cancel(self, episode: Episode) -> None:
        if episode in self.running:
            self.running.remove(episode)
        else:
            self.waiting.remove(episode)

    def sample(self, now: float, preempted: int, generated: float) -> LoadSample:
        used = sum(e.context for e in self.running)
        return LoadSample(
            engine_id="sim0",
            role=EngineRole.UNIFIED,
            scraped_at=now,
            health=EngineHealth.UP,
            kv_capacity_tokens=KV_TOKENS,
            max_model_len=PROMPT + ANSWER[1],
            kv_usage=min(1.0, used / KV_TOKENS),
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            num_waiting_capacity=len(self.waiting),
            num_preemptions=preempted,
            prefix_cache_hits=0,
            prefix_cache_queries=0,
            generation_tokens=int(generated),
        )


@dataclass(slots=True)
class Run:
    decisions: list[Decision]
    caps: list[int]  # the cap at every poll
    turnovers: list[float]  # the turnover clock at every poll
    rates: list[float]  # tokens per second over each poll interval
    preemptions: int
    tokens: float


def run_loop(policy: Policy, start: int, seconds: int, seed: int = 7) -> Run:
    rng = random.Random(seed)
    ctl = Controller(ControllerConfig(initial_inflight=start, max_inflight=1024), policy)
    engine, pacer = Engine(), AdmissionPacer()
    pool: list[Episode] = []
    decisions: list[Decision] = []
    caps, turnovers, rates = [], [], []
    seen_preemptions, seen_tokens = 0, 0.0
    for now in range(seconds):
        room = min(ctl.cap - len(pool), pacer.available(now, ctl.cap, group_size=GROUP))
        for _ in range(max(0, room)):
            episode = Episode(now + rng.random() * 1e-3, rng.randint(*ANSWER))
            pool.append(episode)
            engine.waiting.append(episode)
        if room > 0:
            pacer.admit(now, room)
        for episode in engine.step():
            decisions += ctl.on_completion(
                EpisodeCompletion(tokens=episode.length, ok=True, pool=len(pool)), now=now
            )
            pool.remove(episode)
            pacer.refund()
        if now % POLL_EVERY == 0:
            preempted = engine.preemptions - seen_preemptions
            generated = engine.generated - seen_tokens
            seen_preemptions, seen_tokens = engine.preemptions, engine.generated
            rates.append(generated / POLL_EVERY)
            for decision in ctl.on_poll(
                [engine.sample(now, preempted, generated)], inflight=len(pool), now=now
            ):
                decisions.append(decision)
                pool.sort(key=lambda e: e.admitted_at)
                for victim in pool[len(pool) - decision.shed :] if decision.shed else []:
                    engine.cancel(victim)
                    pool.remove(victim)
            caps.append(ctl.cap)
            turnovers.append(ctl.make_stats(now).turnover)
    return Run(decisions, caps, turnovers, rates, engine.preemptions, engine.generated)


def log(title: str, run: Run, lines: int = 10) -> None:
    """The decision log, shortened: the first and last growth, and what else happened."""
    rate = run.tokens / (len(run.caps) * POLL_EVERY)
    print(
        f"\n--- {title}: knee {KNEE}, final cap {run.caps[-1]}, "
        f"{run.preemptions} preemptions, {rate:.0f} tokens/s"
    )
    notable = [d for d in run.decisions if d.kind is not DecisionKind.GROW][: lines - 3]
    grows = [d for d in run.decisions if d.kind is DecisionKind.GROW]
    shown = {id(d): d for d in grows[:2] + notable + grows[-1:]}.values()
    for d in sorted(shown, key=lambda d: d.at):
        print(f"t={d.at:6.0f}s {d.kind.value:13s} {d.reason}")


def cuts(run: Run) -> list[Decision]:
    return [d for d in run.decisions if d.kind is DecisionKind.CUT]


def turnovers_to_rate(run: Run, rate: float) -> float:
    """When the throughput, averaged over the last ``RATE_POLLS`` polls, first reached ``rate``."""
    for i, turnover in enumerate(run.turnovers):
        window = run.rates[max(0, i - RATE_POLLS + 1) : i + 1]
        if sum(window) / RATE_POLLS >= rate:
            return turnover
    return float("inf")


@pytest.mark.parametrize("policy", [ReferencePolicy, PacerPolicy])
def test_from_a_start_of_1_the_cap_converges_near_the_knee_without_a_preemption_storm(
    policy: type[Policy],
) -> None:
    run = run_loop(policy(), start=1, seconds=1800)
    log(f"{policy.name} from 1", run)
    settled = run.caps[len(run.caps) // 2 :]
    assert min(settled) >= 0.55 * KNEE
    assert sum(settled) / len(settled) <= 1.1 * KNEE
    # Pacer rechecks an aged frontier: a step under it, back, and one probe step past it.
    probe = PacerConfig().frontier_growth if policy is PacerPolicy else 1.0
    assert max(settled) <= 1.1 * KNEE * probe
    assert len(cuts(run)) <= 2
    episodes = run.tokens / (sum(ANSWER) / 2)
    assert run.preemptions <= 0.02 * episodes  # no storm: at most 2 % of episodes preempted


@pytest.mark.parametrize("policy", [ReferencePolicy, PacerPolicy])
def test_from_1024_the_cap_comes_down_without_a_cascade(policy: type[Policy]) -> None:
    run = run_loop(policy(), start=1024, seconds=900)
    log(f"{policy.name} from 1024", run)
    assert run.caps[-1] <= 1.1 * KNEE
    assert min(run.caps) >= 0.4 * KNEE  # no collapse to a handful, as in F4's 1024 -> 8
    drain_epochs = 1 + sum(d.kind is DecisionKind.DRAIN_RELEASE for d in run.decisions)
    assert len(cuts(run)) <= drain_epochs


def best_fixed_rate() -> float:
    """The best steady throughput of a sweep of fixed caps around the knee (second half of
    each run, after the pool filled)."""
    runs = [run_loop(FixedPolicy(), start=cap, seconds=600) for cap in (200, 250, 300, 350)]
    return max(sum(run.rates[len(run.rates) // 2 :]) / (len(run.rates) // 2) for run in runs)


def test_f1_time_to_90_percent_of_the_best_fixed_cap_pacer_beats_reference() -> None:
    """F1 in throughput, not in cap: past the knee a larger cap only queues, so reaching the
    best fixed cap's number is not the point; reaching its tokens per second is."""
    target = 0.9 * best_fixed_rate()
    reference = run_loop(ReferencePolicy(), start=1, seconds=1800)
    pacer = run_loop(PacerPolicy(), start=1, seconds=1800)
    slow, fast = turnovers_to_rate(reference, target), turnovers_to_rate(pacer, target)
    print(f"\nF1: turnovers to {target:.0f} tokens/s: reference {slow:.1f}, pacer {fast:.1f}")
    assert fast <= 30
    assert fast < slow
