"""The run a trainer follows: where its steps appear and where acknowledgements go.

Two kinds, one interface. A hosted run (a worker drives it) is read and acknowledged over the
REST API: its steps are listed with their folders, and ``POST .../steps/{n}/ack/`` stores the
acknowledgement, which wakes the run's worker. A foreground run (``python -m workers.run``) has
no API: its steps are the folders under ``<output>/steps/`` and an acknowledgement is the
file ``<output>/acks/<n>``, written whole (a temporary name, then a rename) since the run
polls for it. Either way the batch is read from the step's folder, so trainer and run must
share a filesystem, as the engines must for the checkpoints.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pacer_cli.client import Api, ApiError

ENDED_STATES = ("completed", "failed", "cancelled")
_STEP_DIR = re.compile(r"^\d{6}$")


class RunError(Exception):
    """The run cannot be followed (no such run, no permission, a refused ack); why."""


@dataclass(frozen=True)
class Step:
    number: int
    folder: Path  # holds batch.pt


@dataclass(frozen=True)
class Acked:
    """Where a run stands with its trainer: the last acknowledged step, its version and the
    checkpoint it named (None when it named none)."""

    step: int
    version: int
    checkpoint: Path | None


class FollowedRun(Protocol):
    def checkpoint_root(self) -> Path:
        """Where checkpoints must be for an acknowledgement to name them."""
        ...

    def acked(self) -> Acked:
        """The last acknowledgement so far (step 0, version 0 before any)."""
        ...

    def waiting(self, after: int) -> list[Step]:
        """Steps written after step ``after`` and not acknowledged, oldest first."""
        ...

    def ended(self) -> bool:
        """True once the run writes no more steps."""
        ...

    def ack(self, step: int, version: int, checkpoint: Path | None) -> None:
        """``checkpoint`` None: the version's weights are the engines' own (the base's)."""
        ...


class HostedRun:
    """A run of the control plane, through its REST API with an operator's token."""

    def __init__(self, api: Api, run_id: int, checkpoints: Path | None = None) -> None:
        """``checkpoints``: the control plane's ``PACER_CHECKPOINTS_DIR`` when it sets one;
        else checkpoints go into the run's own folder, the default root."""
        self.api = api
        self.run_id = run_id
        self._checkpoints = checkpoints
        self._detail = self._get(f"/api/runs/{run_id}/")
        mode = (self._detail.get("config") or {}).get("trainer", {}).get("mode", "none")
        if mode != "external":
            raise RunError(
                f"run {run_id} has trainer mode {mode!r}: it waits for no trainer "
                '(set [trainer] mode = "external" in its config)'
            )

    def checkpoint_root(self) -> Path:
        if self._checkpoints is not None:
            return self._checkpoints
        if not self._detail.get("output_dir"):  # set once a worker has taken the run
            self._detail = self._get(f"/api/runs/{self.run_id}/")
        folder = self._detail.get("output_dir")
        if not folder:
            raise RunError(f"run {self.run_id} has no output folder yet")
        return Path(folder)

    def acked(self) -> Acked:
        last = Acked(0, 0, None)
        for row in self.api.pages(f"/api/runs/{self.run_id}/steps/", page_size=1000):
            if row.get("acked_version") is not None:
                checkpoint = Path(row["acked_checkpoint"]) if row["acked_checkpoint"] else None
                last = Acked(row["step"], row["acked_version"], checkpoint)
        return last

    def waiting(self, after: int) -> list[Step]:
        rows = self.api.pages(f"/api/runs/{self.run_id}/steps/", after=after, page_size=1000)
        return [Step(r["step"], Path(r["path"])) for r in rows if r.get("acked_at") is None]

    def ended(self) -> bool:
        self._detail = self._get(f"/api/runs/{self.run_id}/")
        return self._detail.get("state") in ENDED_STATES

    def ack(self, step: int, version: int, checkpoint: Path | None) -> None:
        body: dict[str, object] = {"policy_version": version}
        if checkpoint is not None:
            body["checkpoint"] = str(checkpoint)
        try:
            self.api.post(f"/api/runs/{self.run_id}/steps/{step}/ack/", body)
        except ApiError as refused:
            raise RunError(f"the ack of step {step} was refused: {_explained(refused)}") from None

    def _get(self, path: str) -> dict[str, Any]:
        try:
            return self.api.get(path)
        except ApiError as refused:
            raise RunError(f"run {self.run_id}: {_explained(refused)}") from None


class FolderRun:
    """A run in the foreground, through its output folder."""

    def __init__(self, output: Path, checkpoints: Path | None = None) -> None:
        """``checkpoints``: the run's ``PACER_CHECKPOINTS_DIR`` when it has one; else the
        output folder, the run's default root."""
        if not output.is_dir():
            raise RunError(f"{output} is not a folder (the run's --output)")
        self.output = output
        self.acks = output / "acks"
        self._checkpoints = checkpoints

    def checkpoint_root(self) -> Path:
        return self._checkpoints or self.output

    def acked(self) -> Acked:
        numbers = [int(p.name) for p in self._ack_files()]
        if not numbers:
            return Acked(0, 0, None)
        step = max(numbers)
        value = json.loads((self.acks / str(step)).read_text())
        if isinstance(value, int):
            return Acked(step, value, None)
        checkpoint = value.get("checkpoint")
        folder = None if not checkpoint else self.checkpoint_root() / checkpoint
        return Acked(step, int(value["policy_version"]), folder)

    def waiting(self, after: int) -> list[Step]:
        steps = self.output / "steps"
        if not steps.is_dir():
            return []
        done = {p.name for p in self._ack_files()}
        found = [
            Step(int(p.name), p)
            for p in steps.iterdir()
            if _STEP_DIR.match(p.name) and int(p.name) > after and str(int(p.name)) not in done
        ]
        return sorted(found, key=lambda s: s.number)

    def ended(self) -> bool:
        return False  # a foreground run leaves no mark when it ends: --max-steps, or Ctrl-C

    def ack(self, step: int, version: int, checkpoint: Path | None) -> None:
        self.acks.mkdir(parents=True, exist_ok=True)
        partial = self.acks / f".{step}.{os.getpid()}.tmp"
        body: dict[str, object] = {"policy_version": version}
        if checkpoint is not None:
            body["checkpoint"] = str(checkpoint)
        partial.write_text(json.dumps(body))
        partial.rename(self.acks / str(step))

    def _ack_files(self) -> list[Path]:
        if not self.acks.is_dir():
            return []
        return [p for p in self.acks.iterdir() if p.name.isdigit()]


def _explained(refused: ApiError) -> str:
    fields = "; ".join(f"{k}: {' '.join(v)}" for k, v in refused.errors.items())
    return f"{refused}{' (' + fields + ')' if fields else ''}"
