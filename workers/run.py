"""Run one config in the foreground, without Django or Celery.

    python -m workers.run configs/multiturn.toml [--output DIR] [--verbose]

Prints a line per step (episodes, tokens per second, cap, reward) and per cap decision.
Ctrl-C stops after the step being written, so the folder holds only whole steps; a second
Ctrl-C abandons the run at once. Exit status: 0 when every step was written, 1 when the run
failed, 2 for a config the checks refuse (nothing is started or written), 130 when stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
import sys
import time
from pathlib import Path

from workers.core.config.fields import ConfigError
from workers.core.config.run import RunConfig, parse_run_config_text
from workers.core.orchestrator.orchestrator import RunOutcome, RunResult
from workers.runtime.checkpoints import checkpoint_root
from workers.runtime.foreground import Foreground

EXIT_FAILED, EXIT_REFUSED, EXIT_STOPPED = 1, 2, 130


def read_config(path: Path) -> RunConfig:
    """A config file, TOML or JSON by its suffix; ConfigError for anything wrong with it."""
    kind = {".toml": "toml", ".json": "json"}.get(path.suffix)
    if kind is None:
        raise ConfigError.single(f"{path}: a config is a .toml or .json file")
    try:
        text = path.read_text()
    except OSError as unreadable:
        raise ConfigError.single(f"{path}: {unreadable.strerror}") from None
    return parse_run_config_text(text, kind)


def default_output(config: RunConfig) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", config.name).strip("-") or "run"
    return Path("var") / "runs" / f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("config", type=Path, help="a run config, .toml or .json")
    parser.add_argument("--output", type=Path, help="the run's folder (default var/runs/NAME-TIME)")
    parser.add_argument("--verbose", action="store_true", help="log every component at INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        config = read_config(args.config)
        if any(engine.url is None for engine in config.engines):
            raise ConfigError.single(
                "engines named by a registered name need the control plane; give their url"
            )
    except ConfigError as refused:
        return _refused(args.config, refused)
    output = args.output or Path(config.output_dir or default_output(config))
    try:
        checkpoints = checkpoint_root(os.environ.get("PACER_CHECKPOINTS_DIR"), output)
        foreground = Foreground(config, output, out=sys.stdout, checkpoints=checkpoints)
        result = asyncio.run(_run(foreground))
    except ConfigError as refused:
        return _refused(args.config, refused)
    except KeyboardInterrupt:
        print(f"abandoned; whole steps only are in {output / 'steps'}", file=sys.stderr)
        return EXIT_STOPPED
    print(f"{result.outcome.value}: {result.reason}; batches in {output / 'steps'}")
    if result.outcome is RunOutcome.FAILED:
        return EXIT_FAILED
    return EXIT_STOPPED if result.outcome is RunOutcome.STOPPED else 0


async def _run(foreground: Foreground) -> RunResult:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    interrupts = 0

    def interrupted() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            print("stopping after the step in progress (Ctrl-C again to abandon)", file=sys.stderr)
            foreground.stop("interrupted")
        elif task is not None:
            task.cancel()

    loop.add_signal_handler(signal.SIGINT, interrupted)
    loop.add_signal_handler(signal.SIGTERM, interrupted)
    try:
        return await foreground.run()
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None


def _refused(path: Path, refused: ConfigError) -> int:
    print(f"{path}: the config is refused", file=sys.stderr)
    for error in refused.errors:
        print(f"  {error}", file=sys.stderr)
    return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
