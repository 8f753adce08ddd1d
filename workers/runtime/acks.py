"""A trainer's acknowledgements for a run outside the control plane: files in the run's
folder. After training on step N, the trainer writes ``<output>/acks/N`` holding the policy
version it now serves: a bare integer, or ``{"policy_version": V, "checkpoint": "DIR"}``
with the folder of that version's weights (checked as the REST API checks it: a loadable
model folder under the allowed root); the run polls for it. A run hosted by a worker reads
acknowledgements from the REST API instead."""

from __future__ import annotations

import json
from pathlib import Path

from workers.core.clock import Clock
from workers.core.orchestrator.ports import Ack
from workers.core.orchestrator.trainer import RunFailed
from workers.runtime.checkpoints import CheckpointRefused, check_checkpoint

POLL_S = 0.25  # how often the folder is looked at: a step takes seconds at the least


class FileAcks:
    def __init__(self, folder: Path, clock: Clock, checkpoints: Path) -> None:
        """``checkpoints``: the folder checkpoints must be in."""
        self.folder = folder
        self.checkpoints = checkpoints
        self._clock = clock
        folder.mkdir(parents=True, exist_ok=True)

    async def wait(self, step: int) -> Ack:
        path = self.folder / str(step)
        while True:
            ack = read_ack(path, self.checkpoints)
            if ack is not None:
                return ack
            await self._clock.sleep(POLL_S)


def read_ack(path: Path, checkpoints: Path) -> Ack | None:
    """The acknowledgement in a file; None while it is absent or half written. RunFailed for
    a whole one naming a checkpoint that cannot be used: with no one to answer, the run says
    why it cannot go on, before any engine is asked to load it."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    checkpoint = None
    if isinstance(value, dict):
        checkpoint = value.get("checkpoint")
        value = value.get("policy_version")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    if checkpoint is None:
        return Ack(value)
    try:
        if not isinstance(checkpoint, str):
            raise CheckpointRefused(f"must be a folder path, got {checkpoint!r}")
        return Ack(value, str(check_checkpoint(checkpoint, checkpoints)))
    except CheckpointRefused as refused:
        raise RunFailed(f"the acknowledgement in {path} is refused: checkpoint {refused}") from None
