"""``python -m pacer_trainer``: follow a run, train on each step, acknowledge it with the new
weights; a line per step.

    python -m pacer_trainer --base MODEL_DIR --run ID [--api URL] [--token T]   # hosted
    python -m pacer_trainer --base MODEL_DIR --output RUN_FOLDER                # foreground

The token and the URL default to ``PACER_TOKEN`` and ``PACER_URL``, as for the ``pacer``
client. A trainer started again on a run picks up where the run stands: the steps already
acknowledged are skipped, and the weights are those of the last acknowledged checkpoint (its
optimizer state is not kept: AdamW starts afresh). It ends once the run has ended and every
step is acknowledged, after ``--max-steps``, or on Ctrl-C (or SIGTERM) between two steps.
Exit status: 0 done, 1 an error (said in one line), 2 bad usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import torch

from pacer_cli.client import Api, ApiError, Unreachable
from pacer_trainer.batch import BatchError, load
from pacer_trainer.model_files import (
    ModelError,
    checkpoint_name,
    load_model,
    prune,
    save_checkpoint,
)
from pacer_trainer.runs import FolderRun, FollowedRun, HostedRun, RunError
from pacer_trainer.trainer import DEFAULT_LR, PolicyTrainer

CHECKPOINTS = "checkpoints"  # under the checkpoint root: checkpoints/v000001, ...
POLL_S = 0.2  # how often the run is asked for a new step: steps take seconds
# How long the API may be unreachable (a web server restarting) before the trainer gives up.
UNREACHABLE_GRACE_S = 60.0
BATCH = "batch.pt"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pacer_trainer",
        description="Pacer's reference trainer: one policy-gradient step per step of a run "
        "in trainer mode external, acknowledged with the new weights.",
    )
    parser.add_argument("--base", type=Path, required=True, help="the run's model folder (HF)")
    run = parser.add_argument_group("a hosted run (REST API)")
    run.add_argument("--run", type=int, help="the run's id")
    run.add_argument("--api", default=os.environ.get("PACER_URL"), help="$PACER_URL")
    run.add_argument("--token", default=os.environ.get("PACER_TOKEN"), help="$PACER_TOKEN")
    folder = parser.add_argument_group("a foreground run (python -m workers.run)")
    folder.add_argument("--output", type=Path, help="the run's output folder")
    parser.add_argument(
        "--checkpoints",
        type=Path,
        default=os.environ.get("PACER_CHECKPOINTS_DIR") or None,
        help="the checkpoint root, when the run has one of its own (PACER_CHECKPOINTS_DIR); "
        "default: the run's folder",
    )
    parser.add_argument("--lr", type=float, default=DEFAULT_LR, help="AdamW's (%(default)g)")
    parser.add_argument(
        "--clip",
        type=float,
        default=0.0,
        help="PPO's ratio clip against the sampler's logprobs, e.g. 0.2 (default 0: the plain "
        "policy gradient)",
    )
    parser.add_argument(
        "--temperature", type=float, default=1.0, help="the run's sampling temperature"
    )
    parser.add_argument("--max-steps", type=int, help="stop once this step is acknowledged")
    parser.add_argument(
        "--keep", type=int, default=0, help="checkpoints kept, the newest (default: all)"
    )
    parser.add_argument(
        "--threads", type=int, help="torch's CPU threads (default: torch's, one per core)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if (args.run is None) == (args.output is None):
        parser.error("follow one run: --run ID (hosted) or --output RUN_FOLDER (foreground)")
    if args.run is not None and not (args.api and args.token):
        parser.error("a hosted run needs --api URL and --token T (or PACER_URL, PACER_TOKEN)")
    if not args.lr > 0:
        parser.error(f"--lr must be above 0, got {args.lr}")
    if not 0 <= args.clip < 1:
        parser.error(f"--clip must be in [0, 1), got {args.clip}")
    if not args.temperature > 0:
        parser.error(f"--temperature must be above 0, got {args.temperature}")
    if args.keep < 0 or (args.max_steps is not None and args.max_steps < 1):
        parser.error("--keep must be 0 or more, --max-steps 1 or more")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be 1 or more, got {args.threads}")
    if not (args.base / "config.json").is_file():
        parser.error(f"--base {args.base}: not a model folder (no config.json)")
    return args


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)
    api = None
    try:
        if args.run is not None:
            api = Api(args.api, args.token)
            run: FollowedRun = HostedRun(api, args.run, args.checkpoints)
        else:
            run = FolderRun(args.output, args.checkpoints)
        return follow(run, args, out)
    except KeyboardInterrupt:
        print("interrupted", file=out, flush=True)
        return 130
    except (RunError, ModelError, BatchError, ApiError, Unreachable) as failed:
        print(f"pacer_trainer: error: {failed}", file=sys.stderr, flush=True)
        return 1
    finally:
        if api is not None:
            api.close()


def follow(run: FollowedRun, args: argparse.Namespace, out: TextIO) -> int:
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    start = run.acked()
    weights = start.checkpoint if start.checkpoint and start.checkpoint.is_dir() else args.base
    model, dtype = load_model(weights)
    trainer = PolicyTrainer(model, lr=args.lr, clip=args.clip or None, temperature=args.temperature)
    version, last, checkpoint = start.version, start.step, start.checkpoint
    where = f"from step {last}, version {version}, " if last else ""
    print(f"following the run {where}weights from {weights}", file=out, flush=True)
    away_since: float | None = None
    while args.max_steps is None or last < args.max_steps:
        try:
            waiting = run.waiting(last)
            if not waiting and run.ended():
                print(f"the run has ended; last step {last}, version {version}", file=out)
                return 0
            away_since = None
        except Unreachable:
            away_since = away_since or time.monotonic()
            if time.monotonic() - away_since > UNREACHABLE_GRACE_S:
                raise
            waiting = []
        if not waiting:
            time.sleep(POLL_S)
            continue
        for step in waiting:
            began = time.monotonic()
            stats = trainer.step(load(step.folder / BATCH))
            trained = time.monotonic()
            # Weights that did not change keep their version and checkpoint: the run then
            # has no engine reload the same weights.
            if stats.stepped:
                version += 1
                root = run.checkpoint_root()
                checkpoint = save_checkpoint(
                    model, args.base, root / CHECKPOINTS / checkpoint_name(version), dtype
                )
                if args.keep:
                    prune(root / CHECKPOINTS, args.keep)
            saved = time.monotonic()
            run.ack(step.number, version, checkpoint)
            last, done = step.number, time.monotonic()
            clipped = f", {stats.clipped:.0%} clipped" if args.clip else ""
            same = "" if stats.stepped else " (unchanged: every group agreed)"
            print(
                f"step {step.number}: loss {stats.loss:+.4f}, reward {stats.reward_mean:.3f}, "
                f"version {version}{same}, {done - began:.2f} s (train {trained - began:.2f}, "
                f"save {saved - trained:.2f}, ack {done - saved:.2f}; {stats.tokens} tokens"
                f"{clipped})",
                file=out,
                flush=True,
            )
            if args.max_steps is not None and last >= args.max_steps:
                break
    print(f"stopped at step {last}, version {version} (--max-steps)", file=out, flush=True)
    return 0


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
