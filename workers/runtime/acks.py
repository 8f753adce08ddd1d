"""A trainer's acknowledgements for a run outside the control plane: files in the run's
folder. After training on step N, the trainer writes ``<output>/acks/N`` holding the policy
version it now serves (a bare integer, or ``{"policy_version": V}``); the run polls for it.
A run hosted by a worker reads acknowledgements from the REST API instead."""

from __future__ import annotations

import json
from pathlib import Path

from workers.core.clock import Clock

POLL_S = 0.25  # how often the folder is looked at: a step takes seconds at the least


class FileAcks:
    def __init__(self, folder: Path, clock: Clock) -> None:
        self.folder = folder
        self._clock = clock
        folder.mkdir(parents=True, exist_ok=True)

    async def wait(self, step: int) -> int:
        path = self.folder / str(step)
        while True:
            version = read_ack(path)
            if version is not None:
                return version
            await self._clock.sleep(POLL_S)


def read_ack(path: Path) -> int | None:
    """The version in an acknowledgement file; None while it is absent or half written."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(value, dict):
        value = value.get("policy_version")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value
