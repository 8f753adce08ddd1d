"""The fields in which run configs differ, as dotted paths with each config's value.

Configs are compared as stored (the document as given), so a field one run sets and another
leaves to its default is a difference, shown as absent in the second: what the operator wrote
is what the page and the CLI put side by side. Tables are walked key by key and arrays index
by index (``env[0].args.turns``); where the configs disagree on the shape itself (a number in
one, a table in another) the whole value at that path is the difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class _Absent:
    """A path a config does not have: unlike null, which a JSON config may hold."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclass(frozen=True, slots=True)
class Difference:
    path: str
    values: tuple[Any, ...]  # one per config, in the order given; ABSENT where missing


def differences(configs: Sequence[Any]) -> list[Difference]:
    """Every leaf path whose value is not the same in all ``configs``: a table's keys in
    sorted order, an array's items by index, so the answer is the same whatever order a
    database keeps a JSON document's keys in (PostgreSQL's jsonb sorts them its own way)."""
    found: list[Difference] = []
    _walk("", tuple(configs), found)
    return found


def _walk(path: str, values: tuple[Any, ...], found: list[Difference]) -> None:
    present = [v for v in values if v is not ABSENT]
    if present and all(isinstance(v, dict) for v in present):
        for key in sorted({key for value in present for key in value}):
            inner = tuple(ABSENT if v is ABSENT else v.get(key, ABSENT) for v in values)
            _walk(f"{path}.{key}" if path else key, inner, found)
        return
    if present and all(isinstance(v, list) for v in present):
        for index in range(max(len(v) for v in present)):
            inner = tuple(ABSENT if v is ABSENT or index >= len(v) else v[index] for v in values)
            _walk(f"{path}[{index}]", inner, found)
        return
    first = values[0]
    if any(not _same(first, other) for other in values[1:]):
        found.append(Difference(path, values))


def _same(one: Any, other: Any) -> bool:
    """Equal as config values: ``true`` is not ``1``, though Python says so; ``1`` is ``1.0``."""
    if one is ABSENT or other is ABSENT:
        return one is other
    if isinstance(one, bool) or isinstance(other, bool):
        return type(one) is type(other) and one == other
    return bool(one == other)
