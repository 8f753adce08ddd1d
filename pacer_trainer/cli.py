"""``python -m pacer_trainer``: follow a run, train on each step, acknowledge it with the new
weights; a line per step.

    python -m pacer_trainer --base MODEL_DIR --run ID [--api URL] [--token T]   # hosted
    python -m pacer_trainer --base MODEL_DIR --output RUN_FOLDER                # foreground

The token and the URL default to ``PACER_TOKEN`` and ``PACER_URL``, as for the ``pacer``
client. A trainer started again on a run picks up where the run stands: the steps already
acknowledged are skipped, and the weights are those of the last acknowledged checkpoint (its
optimizer state is not kept: AdamW starts afresh). It ends once the run has ended and every
step is acknowledged, after ``--max-steps``, or on Ctrl-C or SIGTERM (a checkpoint it was
saving is removed half made; an acknowledgement is sent whole or not at all). While the API
does not answer (a web server restarting) it waits and tries again, for a minute at most.
Exit status: 0 done, 1 an error (said in one line), 2 bad usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO, TypeVar

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
from pacer_trainer.runs import FolderRun, FollowedRun, HostedRun, RunError, Step
from pacer_trainer.trainer import DEFAULT_LR, PolicyTrainer

T = TypeVar("T")
CHECKPOINTS = "checkpoints"  # under the checkpoint root: checkpoints/v000001, ...
POLL_S = 0.2  # how often the run is asked for a new step: steps take seconds
END_CHECK_S = 1.0  # how often it is asked whether it has ended, while no step waits
RETRY_S = 1.0  # between two tries of an API that does not answer
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
    if start.checkpoint is not None and not start.checkpoint.is_dir():
        raise RunError(
            f"step {start.step} was acknowledged with {start.checkpoint}, which is gone: "
            "the trainer cannot take up the weights it left the run on"
        )
    weights = start.checkpoint or args.base
    model, dtype = load_model(weights)
    trainer = PolicyTrainer(model, lr=args.lr, clip=args.clip or None, temperature=args.temperature)
    version, last, checkpoint = start.version, start.step, start.checkpoint
    where = f"from step {last}, version {version}, " if last else ""
    print(f"following the run {where}weights from {weights}", file=out, flush=True)
    watch = Watch(run)
    while args.max_steps is None or last < args.max_steps:
        waiting = watch.steps_after(last)
        if waiting is None:
            print(f"the run has ended; last step {last}, version {version}", file=out)
            return 0
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
            watch.ack(step.number, version, checkpoint)
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


class Watch:
    """The run asked for new steps every POLL_S, and whether it has ended at most every
    END_CHECK_S; an API that does not answer (a web server restarting) is waited for up to
    UNREACHABLE_GRACE_S, then the trainer gives up."""

    def __init__(self, run: FollowedRun) -> None:
        self.run = run
        self._checked = 0.0

    def steps_after(self, step: int) -> list[Step] | None:
        """The steps waiting after ``step``, as soon as there are any; None once the run
        has ended with none waiting."""
        while True:
            waiting = self._patiently(lambda: self.run.waiting(step))
            if waiting:
                return waiting
            if time.monotonic() - self._checked >= END_CHECK_S:
                self._checked = time.monotonic()
                if self._patiently(self.run.ended):
                    return None
            time.sleep(POLL_S)

    def ack(self, step: int, version: int, checkpoint: Path | None) -> None:
        """Sent again while the API does not answer: the same acknowledgement twice is a
        200 that changes nothing."""
        self._patiently(lambda: self.run.ack(step, version, checkpoint))

    @staticmethod
    def _patiently(call: Callable[[], T]) -> T:
        away_since = time.monotonic()
        while True:
            try:
                return call()
            except Unreachable:
                if time.monotonic() - away_since > UNREACHABLE_GRACE_S:
                    raise
                time.sleep(RETRY_S)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
