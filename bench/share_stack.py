"""Runs sharing engines on the quick start's stack: a second equal run, a priority run, and
their ends, in wall-clock time through the API.

    python -m bench.share_stack [--alone 120] [--together 300] [--priority 150] [--after 60]

Starts the stack as ``./scripts/run`` has it (``bench.stack`` with a SQLite file, one Celery
worker, two simulated engines with the quick start's 65,536 KV tokens each) and the demo run
(``configs/demo.toml`` on those engines). Then, looking every 2 s at each run (the API's run
detail, its decisions and the pools) and at the engines (their ``/metrics``):

- alone: the demo run for ``--alone`` seconds; its rate is the engines' generated tokens per
  second over the last half of that;
- together: a second run of the same config for ``--together`` seconds: how soon after its
  start the two hold shares of the pool's episodes within 10 % of equal (averaged over 30 s,
  held for 60 s), in seconds and in turnovers of the pool (as the demo run, which sizes it,
  counts them in its decisions' figures);
  Jain's index of their mean shares from then on; the pool's rate over the last half of the
  window against the demo's alone;
- priority: a third run of the same config at priority 1 for ``--priority`` seconds: when its
  first part is given, when the two others hold no more than theirs (the room made for it),
  when it holds 90 % of its part, and the engines' preemptions meanwhile against those in as
  long a window before it;
- after: the priority run stopped, then, ``--after`` seconds later, the demo run: how soon the
  others' parts are given back (a share decision), and how soon the one left holds 90 % of
  what the pool held.

Runs of one config hold alike KV per episode, so shares of episodes are shares of KV here.
Needs Redis at REDIS_URL.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.stack import ROOT, Stack, pacer_stack
from bench.virtual.share import EQUAL_WITHIN, HOLD_S, SMOOTH_S, jain
from inference.metrics.parse import parse_exposition

LOOK_S = 2.0
RAMP_S = 60.0  # the priority run's ramp: its dispatcher admits a tenth of its part per 5 s
QUICK_START_KV_TOKENS = 65536  # scripts/run's PACER_SIM_KV_TOKENS


@dataclass
class RunLook:
    inflight: int
    cap: int
    ceiling: int | None  # its part, from the pools API; None while alone


@dataclass
class Look:
    at: float  # seconds since the benchmark's start
    runs: dict[int, RunLook]
    tokens: float  # the engines' generated tokens so far
    preemptions: float


@dataclass
class Watch:
    """What the benchmark has seen, look by look."""

    api: httpx.Client
    engines: list[str]
    started: float = field(default_factory=time.monotonic)
    looks: list[Look] = field(default_factory=list)
    live: list[int] = field(default_factory=list)
    _decision_ids: dict[int, int] = field(default_factory=dict)
    shares: dict[int, list[tuple[float, str]]] = field(default_factory=dict)
    turnover_log: dict[int, list[tuple[float, float]]] = field(default_factory=dict)

    def turnovers(self, run_id: int, start: float, end: float) -> float:
        """Turnovers ``run_id``'s controller counted between ``start`` and ``end``, from its
        decisions' figures (the last each side of either time)."""
        log = self.turnover_log.get(run_id, [])

        def at(t: float) -> float:
            return max((turnover for when, turnover in log if when <= t), default=0.0)

        return at(end) - at(start)

    def now(self) -> float:
        return time.monotonic() - self.started

    def look(self) -> Look:
        pools = self.api.get("/api/pools/").raise_for_status().json()
        parts = {r["id"]: r["ceiling"] for pool in pools for r in pool["runs"]}
        runs = {}
        for run_id in self.live:
            detail = self.api.get(f"/api/runs/{run_id}/").raise_for_status().json()
            self._read_decisions(run_id)
            train, evals = detail.get("inflight_train") or 0, detail.get("inflight_eval") or 0
            cap = int(detail.get("cap") or 0)
            runs[run_id] = RunLook(int(train + evals), cap, parts.get(run_id))
        tokens = preemptions = 0.0
        for url in self.engines:
            text = httpx.get(f"{url}/metrics", timeout=5).raise_for_status().text
            for reading in parse_exposition(text, url).values():
                tokens += reading.counters.generation_tokens
                preemptions += reading.counters.preemptions
        look = Look(self.now(), runs, tokens, preemptions)
        self.looks.append(look)
        return look

    def _read_decisions(self, run_id: int) -> None:
        since = self._decision_ids.get(run_id)
        params = {} if since is None else {"since": str(since)}
        while True:
            page = self.api.get(f"/api/runs/{run_id}/decisions/", params=params).raise_for_status()
            found = page.json()
            rows = found["results"] if isinstance(found, dict) else found
            for row in rows:
                self._decision_ids[run_id] = row["id"]
                turnover = (row.get("figures") or {}).get("turnover")
                if turnover is not None:
                    self.turnover_log.setdefault(run_id, []).append((self.now(), float(turnover)))
                if row["kind"] == "share":
                    self.shares.setdefault(run_id, []).append((self.now(), row["reason"]))
            if not rows or not isinstance(found, dict) or not found.get("next"):
                return
            params = {"since": str(self._decision_ids[run_id])}

    def watch(self, seconds: float) -> None:
        end = self.now() + seconds
        while self.now() < end:
            began = time.monotonic()
            self.look()
            time.sleep(max(0.0, LOOK_S - (time.monotonic() - began)))

    def until(self, condition: Callable[[Look], bool], timeout: float) -> float | None:
        """When a look (from now on) met ``condition``; None if none did within ``timeout``."""
        start = self.now()
        while self.now() < start + timeout:
            began = time.monotonic()
            look = self.look()
            if condition(look):
                return look.at
            time.sleep(max(0.0, LOOK_S - (time.monotonic() - began)))
        return None


def rate(looks: list[Look], start: float, end: float) -> float:
    """The engines' generated tokens per second between the looks nearest ``start``/``end``."""
    first = min(looks, key=lambda look: abs(look.at - start))
    last = min(looks, key=lambda look: abs(look.at - end))
    return (last.tokens - first.tokens) / (last.at - first.at) if last.at > first.at else 0.0


def create(api: httpx.Client, document: dict[str, Any]) -> int:
    answer = api.post("/api/runs/", json=document)
    if answer.status_code != 201:
        raise SystemExit(f"creating run {document['name']} failed: {answer.text}")
    return int(answer.json()["id"])


def stop(api: httpx.Client, run_id: int) -> None:
    api.post(f"/api/runs/{run_id}/stop/", json={"reason": "bench.share_stack"}).raise_for_status()


def demo(engines: list[str], name: str, **concurrency: Any) -> dict[str, Any]:
    document = tomllib.loads((ROOT / "configs" / "demo.toml").read_text())
    document["name"] = name
    document["engine"] = [{"url": url} for url in engines]
    document["concurrency"].update(concurrency)
    document["wandb"] = {"mode": "disabled"}
    return document


def converged(watch: Watch, a: int, b: int, since: float) -> float | None:
    """When, after ``since``, the two runs' episode shares averaged over ``SMOOTH_S`` stay within
    ``EQUAL_WITHIN`` of equal for ``HOLD_S``."""
    points = [
        (look.at, look.runs[a].inflight / max(1, look.runs[a].inflight + look.runs[b].inflight))
        for look in watch.looks
        if look.at >= since and a in look.runs and b in look.runs
    ]
    smoothed = [
        (at, statistics.mean(x for t, x in points if at - SMOOTH_S <= t <= at)) for at, _ in points
    ]
    low, high = 0.5 * (1 - EQUAL_WITHIN), 0.5 * (1 + EQUAL_WITHIN)
    for at, _ in smoothed:
        if at < since + SMOOTH_S:
            continue
        held = [x for t, x in smoothed if at <= t <= at + HOLD_S]
        if held and smoothed[-1][0] >= at + HOLD_S and all(low <= x <= high for x in held):
            return at
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alone", type=float, default=120.0)
    parser.add_argument("--together", type=float, default=300.0)
    parser.add_argument("--priority", type=float, default=150.0)
    parser.add_argument("--after", type=float, default=60.0)
    args = parser.parse_args()
    for name in ("alone", "together", "after"):
        if getattr(args, name) < 30:
            parser.error(f"--{name} must be at least 30 s")
    if args.priority < RAMP_S:
        parser.error(f"--priority must be at least {RAMP_S:g} s")
    kv = ("--kv-tokens", str(QUICK_START_KV_TOKENS))
    with pacer_stack(2, worker_concurrency=4, database="sqlite", engine_args=kv) as stack:
        report(stack, args)


def report(stack: Stack, args: argparse.Namespace) -> None:
    api = httpx.Client(
        base_url=stack.web_url, headers={"Authorization": f"Token {stack.token}"}, timeout=30
    )
    watch = Watch(api, stack.engine_urls)
    first = create(api, demo(stack.engine_urls, "demo"))
    watch.live.append(first)
    watch.watch(args.alone)
    alone = rate(watch.looks, args.alone / 2, watch.now())
    print(f"demo run {first} alone: {alone:,.0f} tokens/s over its last {args.alone / 2:g} s")

    second = create(api, demo(stack.engine_urls, "demo-2"))
    joined = watch.now()
    watch.live.append(second)
    watch.watch(args.together)
    at = converged(watch, first, second, joined)
    if at is None:
        print(f"runs {first} and {second}: never within 10 % of equal shares")
        window_start = joined
    else:
        turns = watch.turnovers(first, joined, at)
        print(
            f"runs {first} and {second}: within 10 % of equal shares {at - joined:.0f} s after "
            f"the second's start ({turns:.1f} turnovers of the pool, as run {first}, which "
            "sizes it, counts them)"
        )
        window_start = at
    window = [look for look in watch.looks if look.at >= window_start]
    mean = statistics.mean(
        look.runs[first].inflight / max(1, look.runs[first].inflight + look.runs[second].inflight)
        for look in window
    )
    fairness = jain([mean, 1 - mean])
    print(f"  Jain's index from then on {fairness:.3f} (mean shares {mean:.2f} / {1 - mean:.2f})")
    together = rate(watch.looks, joined + args.together / 2, watch.now())
    print(
        f"  pool {together:,.0f} tokens/s over the last {args.together / 2:g} s: "
        f"{together / alone:.3f} of the demo alone"
    )

    before_preemptions = (
        watch.looks[-1].preemptions - _nearest(watch, watch.now() - args.priority).preemptions
    )
    urgent = create(api, demo(stack.engine_urls, "urgent", priority=1))
    came = watch.now()
    watch.live.append(urgent)
    given = watch.until(lambda look: look.runs[urgent].ceiling is not None, args.priority)
    room = watch.until(
        lambda look: all(
            look.runs[r].ceiling is not None and look.runs[r].inflight <= look.runs[r].ceiling
            for r in (first, second)
        ),
        args.priority,
    )
    filled = watch.until(
        lambda look: (
            look.runs[urgent].ceiling is not None
            and look.runs[urgent].inflight >= 0.9 * look.runs[urgent].ceiling
        ),
        args.priority,
    )
    watch.watch(max(0.0, came + args.priority - watch.now()))
    last = watch.looks[-1]
    during = last.preemptions - _nearest(watch, came).preemptions
    print(
        f"run {urgent} (priority 1): part given {_after(given, came)}, the others within "
        f"theirs {_after(room, came)}, 90 % of its part held {_after(filled, came)}; its part "
        f"{last.runs[urgent].ceiling}, theirs {last.runs[first].ceiling} / "
        f"{last.runs[second].ceiling}; preemptions in its {args.priority:g} s {during:,.0f} "
        f"(in as long before: {before_preemptions:,.0f})"
    )
    ramp = rate(watch.looks, came, came + RAMP_S)
    before = rate(watch.looks, came - RAMP_S, came)
    print(
        f"  pool {ramp:,.0f} tokens/s in its first {RAMP_S:g} s ({ramp / before:.3f} of the "
        f"{before:,.0f} in as long before)"
    )

    held = sum(run.inflight for run in last.runs.values())
    stop(api, urgent)
    stopped = watch.now()
    back = watch.until(lambda look: _parts(look, first, second), args.after)
    watch.live.remove(urgent)
    refilled = watch.until(lambda look: _inflight(look, first, second) >= 0.9 * held, args.after)
    print(
        f"run {urgent} stopped: the others' parts back {_after(back, stopped)}, the two hold "
        f"90 % of the pool's {held} {_after(refilled, stopped)}"
    )
    watch.watch(max(0.0, stopped + args.after - watch.now()))

    held = sum(run.inflight for run in watch.looks[-1].runs.values())
    stop(api, first)
    ended = watch.now()
    watch.live.remove(first)
    alone_again = watch.until(lambda look: look.runs[second].ceiling is None, args.after)
    refilled = watch.until(lambda look: look.runs[second].inflight >= 0.9 * held, args.after)
    print(
        f"run {first} stopped: run {second} alone again {_after(alone_again, ended)}, holds 90 % "
        f"of the pool's {held} {_after(refilled, ended)}"
    )
    stop(api, second)


def _parts(look: Look, first: int, second: int) -> bool:
    """Both runs hold more than the one episode a priority run left each."""
    return all((look.runs[r].ceiling or 0) > 1 for r in (first, second))


def _inflight(look: Look, *runs: int) -> int:
    return sum(look.runs[r].inflight for r in runs)


def _nearest(watch: Watch, at: float) -> Look:
    return min(watch.looks, key=lambda look: abs(look.at - at))


def _after(at: float | None, since: float) -> str:
    return "never" if at is None else f"{at - since:.0f} s after"


if __name__ == "__main__":
    main()
