"""The ``python -m bench`` subcommands; each prints what it measured and its wall time."""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.virtual.run import run_workload
from bench.virtual.workload import load_workload
from workers.core.config.fields import ConfigError


def _run(args: argparse.Namespace) -> None:
    workload = load_workload(args.workload)
    outcome = run_workload(workload, args.policy, seconds=args.seconds, start=args.start)
    figures = outcome.figures()
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for key, value in figures.items():
        print(f"{key:>20}: {value}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="one policy on one workload")
    run.add_argument("--workload", required=True)
    run.add_argument("--policy", required=True, help="reference, pacer, gradient2 or fixed:N")
    run.add_argument("--seconds", type=float, default=None, help="virtual seconds to run")
    run.add_argument("--start", type=int, default=None, help="start cap (adaptive policies)")
    run.add_argument("--json", action="store_true")
    run.set_defaults(handler=_run)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        args.handler(args)
    except ConfigError as bad:
        for error in bad.errors:
            print(f"{args.workload}: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"wall time {time.perf_counter() - started:.1f} s", file=sys.stderr)
