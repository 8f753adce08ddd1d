"""The real-engine benchmarks' own arithmetic and arguments (the runs need vLLM: see
``python -m bench.engine_ladder`` and ``python -m bench.prefill_attention``)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import engine_ladder, prefill_attention
from bench.engine_ladder import Outcome, print_table, setups


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--caps", "0,8"], "--caps: one or more caps from 1 to 64"),
        (["--caps", "8,65"], "--caps: one or more caps from 1 to 64"),
        (["--seconds", "5"], "--seconds must be from 10 to 3600"),
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--only", "pacer from 2"], "--only: no configuration pacer from 2; known: fixed 4"),
    ],
)
def test_a_bad_argument_is_refused_before_any_engine_starts(
    argv: list[str], said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_engine(*args: object) -> None:
        raise AssertionError("an engine was started")

    monkeypatch.setattr(engine_ladder, "running_vllm", no_engine)
    with pytest.raises(SystemExit) as refused:
        engine_ladder.main(argv)
    assert said in str(refused.value)


def test_the_table_reads_every_configuration_against_the_best_fixed_caps_median(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ladder = setups([8, 16])
    rates = {"fixed 8": (100, 300, 200), "fixed 16": (390, 400, 410)}
    results = {
        s.name: [Outcome(r, s.start, 0, 0) for r in rates.get(s.name, (380, 0, 500))]
        for s in ladder
    }
    print_table(results, ladder)
    out = capsys.readouterr().out
    assert "best fixed cap: 16 (400 tokens/s, median)" in out
    assert "| fixed 8 | 100, 300, 200 | 200 | 0.500 |" in out
    assert "| pacer from 1 | 380, 0, 500 | 380 | 0.950 |" in out


def test_the_prefill_fit_recovers_a_quadratic_and_never_gives_a_negative_cost() -> None:
    lengths = np.array([128.0, 512, 1024, 2048, 3072, 4000])
    pairs = lengths * (lengths + 1) / 2
    exact = 0.004 + 2e-6 * lengths + 3e-9 * pairs
    assert prefill_attention.fit(lengths, exact) == pytest.approx([0.004, 2e-6, 3e-9], rel=1e-6)
    # Times whose unconstrained fit trades a negative per-token term for a larger pair term
    # (the measured ones of bench.prefill_attention's first run).
    measured = np.array([5.3, 5.8, 10.1, 15.4, 23.0, 51.5]) / 1e3
    a, b, d = prefill_attention.fit(lengths, measured)
    assert min(a, b, d) >= 0 and d > 0
