"""The ``python -m bench`` subcommands; each prints what it measured and its wall time."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from bench.virtual.fit import fit_workload, workload_toml
from bench.virtual.join import DEFAULT_WORKLOAD, join_benchmark
from bench.virtual.pool_workload import load_pool_workload
from bench.virtual.report import BENCH_DIR, RESULTS, build_report, stored_oracle, write_sensitivity
from bench.virtual.run import run_workload
from bench.virtual.sensitivity import sensitivity
from bench.virtual.share import share_benchmark, shipped_pools
from bench.virtual.suite import sweep
from bench.virtual.workload import UPDATE_MODES, load_workload, parse_workload
from workers.core.config.fields import ConfigError


def _run(args: argparse.Namespace) -> None:
    workload = load_workload(args.workload)
    if args.updates is not None:
        if workload.training is None:
            print(f"{args.workload}: --updates needs a [trainer] in the workload", file=sys.stderr)
            raise SystemExit(2)
        training = dataclasses.replace(workload.training, updates=args.updates)
        workload = dataclasses.replace(workload, training=training)
    oracle, source = _oracle(args, workload.name)
    outcome = run_workload(workload, args.policy, seconds=args.seconds, start=args.start)
    figures = outcome.figures(oracle) | {"oracle": round(oracle, 1), "oracle_from": source}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for key, value in figures.items():
        print(f"{key:>23}: {value}")


def _oracle(args: argparse.Namespace, name: str) -> tuple[float, str]:
    """The oracle to read one run against, and where it came from, found before the run so
    that a run never ends without its ratios: the flags first, as the caller asked for
    them, then the last report's sweep."""
    if args.oracle is not None:
        return args.oracle, "the --oracle flag"
    if args.sweep:
        curve = sweep(args.workload)
        return curve.oracle, f"a sweep now (best cap {curve.best_cap})"
    stored, where = stored_oracle(args.workload, name), RESULTS.relative_to(BENCH_DIR.parent)
    if stored is None:
        print(
            f"{args.workload}: no oracle for {name}: {where} has no sweep of it; "
            "pass --oracle TOKENS_PER_S, or --sweep to sweep it now",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return stored, str(where)


def _sweep(args: argparse.Namespace) -> None:
    load_workload(args.workload)  # field errors before any process starts
    curve = sweep(args.workload)
    print(curve.table())
    print(f"oracle: cap {curve.best_cap}, {curve.oracle:,.0f} tokens/s; curve {curve.shape()}")


def _report(args: argparse.Namespace) -> None:
    print(f"wrote {build_report(args.workload or None)}")


def _sensitivity(args: argparse.Namespace) -> None:
    workload = load_workload(args.workload)
    table = sensitivity(args.workload)
    print(table)
    path = write_sensitivity(workload.name, table)
    print(f"wrote {path}; the next report includes it")


def _join(args: argparse.Namespace) -> None:
    load_workload(args.workload)  # field errors before any process starts
    try:
        print(join_benchmark(args.workload))
    except ValueError as unfit:
        print(unfit, file=sys.stderr)
        raise SystemExit(2) from None


def _share(args: argparse.Namespace) -> None:
    chosen = args.workload or shipped_pools()
    for path in chosen:  # field errors before any run starts
        args.where = path
        load_pool_workload(path)
    print(share_benchmark(chosen, args.policy, args.seconds))


def _fit(args: argparse.Namespace) -> None:
    from bench.virtual.recorded import read_run, setup_django

    setup_django()
    try:
        recorded = read_run(args.run)
    except LookupError as missing:
        print(missing, file=sys.stderr)
        raise SystemExit(2) from None
    document = fit_workload(recorded)
    parse_workload(document, args.out)  # what bench run would refuse is refused here
    Path(args.out).write_text(workload_toml(document))
    print(f"wrote {args.out}: {document['workload']['description']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="one policy on one workload")
    run.add_argument("--workload", required=True)
    run.add_argument("--policy", required=True, help="reference, pacer, gradient2 or fixed:N")
    run.add_argument("--seconds", type=float, default=None, help="virtual seconds to run")
    run.add_argument("--start", type=int, default=None, help="start cap (adaptive policies)")
    run.add_argument(
        "--updates", choices=UPDATE_MODES, default=None, help="the workload's [trainer] updates"
    )
    run.add_argument("--json", action="store_true")
    oracle = run.add_mutually_exclusive_group()
    oracle.add_argument(
        "--oracle",
        type=float,
        metavar="TOKENS_PER_S",
        help="the oracle's rate (default: the workload's sweep in bench/report/results.json)",
    )
    oracle.add_argument("--sweep", action="store_true", help="sweep the workload for the oracle")
    run.set_defaults(handler=_run)
    sweep_ = commands.add_parser("sweep", help="the oracle: every fixed cap of the ladder")
    sweep_.add_argument("--workload", required=True)
    sweep_.set_defaults(handler=_sweep)
    report = commands.add_parser("report", help="the whole suite into bench/REPORT.md")
    report.add_argument("--workload", action="append", help="only these (repeatable)")
    report.set_defaults(handler=_report)
    sens = commands.add_parser("sensitivity", help="each pacer threshold at 0.8x and 1.2x")
    sens.add_argument("--workload", required=True)
    sens.set_defaults(handler=_sensitivity)
    join = commands.add_parser("join", help="an engine joins: time to 90 %% of the new best")
    join.add_argument("--workload", default=DEFAULT_WORKLOAD, help="default: W9")
    join.set_defaults(handler=_join)
    share = commands.add_parser("share", help="runs sharing engines: shares, fairness, rate")
    share.add_argument(
        "--workload", action="append", help="multi-run workloads (default: bench/workloads/s*)"
    )
    share.add_argument("--policy", default="pacer", help="every run's: reference, pacer, ...")
    share.add_argument("--seconds", type=float, default=None, help="virtual seconds to run")
    share.set_defaults(handler=_share)
    fit = commands.add_parser("fit", help="a workload file fitted to a recorded run")
    fit.add_argument("--run", required=True, type=int, help="the run's id")
    fit.add_argument("--out", default=None, help="the file to write (default fit-ID.toml)")
    fit.set_defaults(handler=_fit)
    args = parser.parse_args(argv)
    if args.command == "fit" and args.out is None:
        args.out = f"fit-{args.run}.toml"
    started = time.perf_counter()
    try:
        args.handler(args)
    except ConfigError as bad:
        for error in bad.errors:
            where = getattr(args, "where", None) or getattr(args, "workload", None)
            where = where or getattr(args, "out", "")
            print(f"{where}: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"wall time {time.perf_counter() - started:.1f} s", file=sys.stderr)
