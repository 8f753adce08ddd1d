"""A trainer's checkpoint, checked before its acknowledgement is stored: a folder that vLLM
can load new weights from, under the folder the engines are known to be able to read.

An acknowledgement names the folder its new weights are in (``{"checkpoint": "DIR"}``). The
engines will load it by path (vLLM's ``reload_weights(weights_path=...)``), so the folder must
be a Hugging Face model folder in the format vLLM reads: a ``config.json`` and the weights as
safetensors, one file or shards named by ``model.safetensors.index.json``. Anything else is
refused here, with the reason, before any engine is touched: a half-written or mistyped
checkpoint found by an engine mid-update would leave the pool on two versions. Each weights
file's header is read too, so a file cut short (a trainer killed while saving) is refused.

The folder must be under the allowed root (the run's own folder, or
``PACER_CHECKPOINTS_DIR``): the one place web, workers and engines are set up to share, and
the only place an API caller may point the engines' file reads at. The rule is checked on
the resolved path, so ``..`` and symlinks cannot lead out of it.

Plain functions on paths, importing nothing of the rest of the runtime: the web process
(the REST API's ack) and the file form of trainer mode ``external`` share them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePath

from inference.safetensors_check import safetensors_problem

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
WEIGHTS_SUFFIX = ".safetensors"


class CheckpointRefused(ValueError):
    """The checkpoint cannot be used; the message says why, for the trainer to fix it."""


def checkpoint_root(configured: str | os.PathLike[str] | None, run_folder: Path) -> Path:
    """Where a run's checkpoints may be: ``PACER_CHECKPOINTS_DIR`` when set, else the run's
    own folder (which the trainer already reads its batches from)."""
    return Path(configured) if configured else run_folder


def check_checkpoint(asked: str, root: Path) -> Path:
    """The resolved folder ``asked`` names (relative to ``root`` unless absolute), once it is
    under ``root`` and a loadable model folder; CheckpointRefused otherwise."""
    if not asked.strip() or "\x00" in asked:
        raise CheckpointRefused(f"must name a folder, got {asked!r}")
    if ".." in PurePath(asked).parts:
        raise CheckpointRefused(f"may not go up a folder ('..'), got {asked!r}")
    try:
        base = root.resolve()
        folder = (root / asked).resolve()  # an absolute ``asked`` replaces ``root``
        if not folder.is_relative_to(base):
            raise CheckpointRefused(f"must be inside {root}, got {asked!r} (which is {folder})")
        if not folder.exists():
            raise CheckpointRefused(f"{asked!r} does not exist")
        if not folder.is_dir():
            raise CheckpointRefused(f"{asked!r} is not a folder")
        if not os.access(folder, os.R_OK | os.X_OK):
            raise CheckpointRefused(f"{asked!r} is not readable")
        model = _Model(asked, folder, base)
        model.check_config()
        model.check_weights()
    except OSError as unreadable:  # a name too long, a folder unreadable half way, ...
        raise CheckpointRefused(f"{asked!r} cannot be read: {unreadable.strerror}") from None
    return folder


class _Model:
    """The files of a model folder, each checked as vLLM will read it."""

    def __init__(self, asked: str, folder: Path, base: Path) -> None:
        self.asked, self.folder, self.base = asked, folder, base

    def check_config(self) -> None:
        config = self._readable(CONFIG, missing="a model folder needs one")
        try:
            document = json.loads(config.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as bad:
            raise self._refused(f"{CONFIG} is not JSON ({bad})") from None
        if not isinstance(document, dict):
            raise self._refused(f"{CONFIG} holds a {type(document).__name__}, not an object")

    def check_weights(self) -> None:
        """Sharded weights (an index) need every shard the index names, in the folder
        itself; otherwise one ``*.safetensors`` file at least (vLLM reads no other format
        when it is not told to)."""
        if (self.folder / INDEX).exists():
            shards = self._shards(self._readable(INDEX))
            missing = [shard for shard in shards if not (self.folder / shard).is_file()]
            if missing:
                raise self._refused(f"{INDEX} names missing shards: {', '.join(missing)}")
        else:
            shards = sorted(
                p.name for p in self.folder.iterdir() if p.name.endswith(WEIGHTS_SUFFIX)
            )
            if not shards:
                raise self._refused(f"no weights: no *{WEIGHTS_SUFFIX} file, no {INDEX}")
        for shard in shards:
            problem = safetensors_problem(self._readable(shard))
            if problem is not None:
                raise self._refused(problem)

    def _shards(self, index: Path) -> list[str]:
        try:
            names = set(json.loads(index.read_text())["weight_map"].values())
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            names = set()
        if not names or not all(isinstance(name, str) for name in names):
            raise self._refused(f"{INDEX} is not an index: no weight_map of shard files")
        outside = sorted(name for name in names if PurePath(name).name != name)
        if outside:
            raise self._refused(f"{INDEX} names shards outside the folder: {', '.join(outside)}")
        return sorted(names)

    def _readable(self, name: str, missing: str = "") -> Path:
        """``name`` in the folder as a readable file that resolves inside the root: a file
        symlinked out of it is no more readable by the engines than a folder outside it."""
        path = self.folder / name
        if not path.is_file():
            raise self._refused(f"no {name}" + (f" ({missing})" if missing else ""))
        if not path.resolve().is_relative_to(self.base):
            raise self._refused(f"{name} leads out of {self.base} (to {path.resolve()})")
        if not os.access(path, os.R_OK):
            raise self._refused(f"{name} is not readable")
        return path

    def _refused(self, why: str) -> CheckpointRefused:
        return CheckpointRefused(f"{self.asked!r}: {why}")
