"""Where a hosted run writes: ``<PACER_RUNS_DIR>/<run id>/``, or with ``[output] dir`` in its
config, ``<PACER_RUNS_DIR>/<dir>/<run id>/``.

The folder is always under the runs folder (the one place web and workers share, and the
only place a config may make a worker write), and always ends in the run's id, so no two runs
ever share one: a second run in a first run's folder would adopt its steps through step
recovery, and both would then write the same steps. A folder named by digits alone is a
run's, so ``dir`` may hold none: otherwise run 3's ``dir = "7"`` would sit in run 7's folder.
"""

from __future__ import annotations

from pathlib import Path, PurePath

from workers.core.config.fields import ConfigError

FIELD = "output.dir"


def output_subfolder(root: Path, asked: str | None) -> PurePath:
    """``asked`` as a folder under ``root`` (empty when not asked); ConfigError at
    ``output.dir`` for one outside it, or with a part that could be a run's folder."""
    if asked is None:
        return PurePath()
    wanted = PurePath(asked)
    if wanted.is_absolute():
        base = root.resolve()
        if not Path(wanted).resolve().is_relative_to(base):
            raise _outside(root, asked)
        wanted = Path(wanted).resolve().relative_to(base)
    if ".." in wanted.parts:
        raise _outside(root, asked)
    for part in wanted.parts:
        if part.isdigit():
            raise ConfigError.single(
                f"{part!r} is a run's folder name (digits only): give folders a letter", FIELD
            )
    if not (root / wanted).resolve().is_relative_to(root.resolve()):  # a symlink out
        raise _outside(root, asked)
    return wanted


def run_folder(root: Path, run_id: int, asked: str | None) -> Path:
    """The folder of run ``run_id``: under ``root``, in ``asked`` if given, ending in its id."""
    return root / output_subfolder(root, asked) / str(run_id)


def _outside(root: Path, asked: str) -> ConfigError:
    return ConfigError.single(f"must be inside PACER_RUNS_DIR ({root}), got {asked!r}", FIELD)
