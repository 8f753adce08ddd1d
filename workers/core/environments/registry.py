"""Which environments a run can name: the built-in ones, and those other packages register
under the entry-point group ``pacer.environments`` (``name = "package.module:Class"``).

Entry points are read when a config is checked, so an environment installed a moment ago is
found without a restart; one that fails to load is an error naming it, never a silent skip.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from workers.core.config.fields import Table
from workers.core.environments.arithmetic import Arithmetic
from workers.core.environments.base import Environment
from workers.core.environments.longtail import LongTail
from workers.core.environments.multiturn import MultiTurn
from workers.core.environments.targetwords import TargetWords

ENTRY_POINT_GROUP = "pacer.environments"
BUILT_IN: dict[str, type[Environment]] = {
    env.name: env  # type: ignore[misc]
    for env in (Arithmetic, MultiTurn, LongTail, TargetWords)
}


def available() -> list[str]:
    """Every environment name a config may use, built-in first."""
    plugged = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    return [*BUILT_IN, *(name for name in plugged if name not in BUILT_IN)]


def make_environment(name: str, args: Table, path: str) -> Environment | None:
    """The environment ``name`` built from ``args``; None (errors recorded at ``path`` and
    under the args' own paths) when it is unknown, does not load, or refuses its args."""
    errors = args.errors
    cls = BUILT_IN.get(name) or _plugged(name, path, args)
    if cls is None:
        return None
    before = len(errors.found)
    try:
        made = cls.from_args(args)
    except ValueError as refused:
        errors.add(args.path, str(refused))
        return None
    return made if len(errors.found) == before else None


def _plugged(name: str, path: str, args: Table) -> type[Environment] | None:
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        args.errors.add(path, f"unknown environment {name!r} (known: {', '.join(available())})")
        return None
    try:
        cls = found[0].load()
    except Exception as failed:  # anything an import can raise: the message must name it
        args.errors.add(path, f"environment {name!r} ({found[0].value}) failed to load: {failed}")
        return None
    if not (hasattr(cls, "from_args") and hasattr(cls, "run")):
        args.errors.add(path, f"environment {name!r} ({found[0].value}) has no from_args and run")
        return None
    return cls
