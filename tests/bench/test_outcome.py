"""A run's figures read apart: the steady ratio over the second half, the ramp in seconds and
in turnovers, on outcomes built by hand so that every figure is known in advance."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.virtual.cli import main
from bench.virtual.outcome import RunOutcome, Sample
from bench.virtual.suite import Sweep

SECONDS = 100.0


def tokens_at(at: float) -> int:
    """A ramp with three rates: 50 tokens/s up to 50 s, 100 up to 75 s, 200 to the end.
    The whole run's rate (100), its first half's (50), its last quarter's (200) and its
    second half's (150) all differ, so a wrong window cannot pass for the right one."""
    if at <= 50:
        return round(50 * at)
    if at <= 75:
        return 2500 + round(100 * (at - 50))
    return 5000 + round(200 * (at - 75))


def outcome(poll_every: float, in_flight: Callable[[float], int] = lambda at: 0) -> RunOutcome:
    """The ramp polled every ``poll_every`` seconds; ``in_flight`` gives the tokens generated
    by then for episodes not yet completed."""
    polls = [i * poll_every for i in range(int(SECONDS / poll_every) + 1)]
    samples = tuple(
        Sample(
            at=at,
            cap=10,
            inflight=10,
            completed_tokens=tokens_at(at),
            progress=tokens_at(at) + in_flight(at),
            kv=0.5,
            running=10,
            waiting=0,
            turnover=at / 10,  # episodes of ten seconds: one turnover every ten seconds
        )
        for at in polls
    )
    return RunOutcome(
        workload="t",
        policy="pacer",
        seconds=SECONDS,
        completed_tokens=tokens_at(SECONDS),
        progress_tokens=tokens_at(SECONDS) + in_flight(SECONDS),
        completed_episodes=100,
        failed_episodes=0,
        wasted_tokens=0,
        preemptions=0,
        max_kv=0.5,
        samples=samples,
        engine_runs=0,
    )


def test_the_steady_rate_is_the_second_half_of_the_run() -> None:
    run = outcome(poll_every=5.0)
    assert run.throughput == 100.0
    assert run.steady_throughput == 150.0
    figures = run.figures(oracle=120.0)
    assert figures["ratio_to_oracle"] == pytest.approx(100 / 120, abs=1e-3)
    assert figures["steady_ratio"] == 1.25


def test_the_second_half_is_not_paid_for_work_done_before_it() -> None:
    """Half the first half's work was still in flight at 50 s and completed after it: the
    completions of the second half (7,500 tokens) hold 2,500 tokens generated before it, so
    its rate is 100 tokens/s, not 150. A pool held at the same work in flight throughout
    changes nothing."""
    backlog = outcome(poll_every=5.0, in_flight=lambda at: 2500 if at <= 50 else 0)
    assert backlog.steady_throughput == 100.0
    assert outcome(poll_every=5.0, in_flight=lambda at: 800).steady_throughput == 150.0


def test_the_second_half_is_also_read_quarter_by_quarter() -> None:
    """100 tokens/s from 50 s to 75 s, 200 after: the quarters, and their mean, which is the
    second half's rate; a sweep shows them as ratios to its oracle, as do the figures."""
    run = outcome(poll_every=5.0)
    assert run.steady_quarters == (100.0, 200.0)
    assert sum(run.steady_quarters) / 2 == run.steady_throughput
    assert Sweep((10,), (run,)).quarters(run) == "1.00 / 2.00"
    assert run.figures(oracle=200.0)["steady_quarter_ratios"] == [0.5, 1.0]
    assert run.figures()["steady_quarter_ratios"] is None


def test_a_quarter_shorter_than_a_poll_interval_still_spans_one_poll() -> None:
    """Polls every 40 s: the third quarter (50 s to 75 s) holds none, so it is read from the
    poll at 40 s to the one at 80 s (the rate there is 100 tokens/s, then 200)."""
    third, last = outcome(poll_every=40.0).steady_quarters
    assert third == pytest.approx((tokens_at(80) - tokens_at(40)) / 40)
    assert last == pytest.approx((tokens_at(100) - tokens_at(40)) / 60)


def test_a_sweep_names_the_best_whole_run_and_the_best_second_half_apart() -> None:
    """Cap 10 delivers more over the whole run (120 tokens/s against 100) but half its first
    half's work was a backlog; cap 20's second half does more (150 tokens/s): the oracle is
    cap 10's whole run, the best second half cap 20's, read against that oracle."""
    backlogged = outcome(poll_every=5.0, in_flight=lambda at: 2500 if at <= 50 else 0)
    faster_start = dataclasses.replace(backlogged, completed_tokens=12000)
    sweep = Sweep((10, 20), (faster_start, outcome(poll_every=5.0)))
    assert (sweep.best_cap, sweep.oracle) == (10, 120.0)
    assert sweep.steady_best() == (20, 1.25)


def test_the_second_half_starts_at_the_last_poll_before_half_way() -> None:
    """Polls every 7 s: none falls on 50 s, so the second half is read from the poll at 49 s
    (2,450 tokens), never from one past half-way."""
    assert outcome(poll_every=7.0).steady_throughput == pytest.approx((10000 - 2450) / 51)


def test_the_ramp_is_read_in_seconds_and_in_the_controllers_turnovers() -> None:
    """90 % of 120 tokens/s is 108: the trailing minute first delivers it at 90 s (6,500
    tokens since 30 s), when the controller had counted nine turnovers."""
    figures = outcome(poll_every=5.0).figures(oracle=120.0)
    assert (figures["time_to_90pct_s"], figures["time_to_90pct_turnovers"]) == (90.0, 9.0)


def test_without_an_oracle_only_the_figures_against_it_are_missing() -> None:
    figures = outcome(poll_every=5.0).figures()
    assert figures["steady_throughput"] == 150.0
    assert figures["steady_ratio"] is None
    assert figures["time_to_90pct_s"] is None and figures["time_to_90pct_turnovers"] is None


def test_a_run_with_no_oracle_anywhere_is_refused_before_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = tmp_path / "unswept.toml"
    workload.write_text(
        '[workload]\nname = "unswept"\n[[engine]]\nkv_tokens = 8192\nmax_model_len = 1024\n'
        '[[env]]\nname = "longtail"\n[env.args]\ncompletion_tokens = 100\n'
    )
    with pytest.raises(SystemExit) as exited:
        main(["run", "--workload", str(workload), "--policy", "pacer"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "bench/report/results.json" in error
    assert "--oracle TOKENS_PER_S" in error and "--sweep" in error
