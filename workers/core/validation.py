"""Checks with messages that name the field and its valid range: config fields, operator caps
and values read back from stored state.

Stored state is read strictly: ``bool("false")`` is True and ``int(60.7)`` is 60, so a value of
the wrong type is refused rather than coerced into something the writer never meant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def check_range(name: str, value: float, low: float, high: float) -> None:
    """Raise ValueError unless ``value`` is a number with ``low <= value <= high``; with
    integer bounds it must be an integer too (a count of polls is never 2.5)."""
    integral = isinstance(low, int) and isinstance(high, int)
    kinds: tuple[type, ...] = (int,) if integral else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        kind = "an integer" if integral else "a number"
        raise ValueError(f"{name} must be {kind} in [{low}, {high}], got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


def check_seconds(name: str, value: object) -> float:
    """A duration given at run time (an operator's TTL): a finite number of seconds > 0."""
    seconds = finite(value)
    if seconds is None or seconds <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return seconds


def check_cap(cap: object, low: int, high: int, name: str = "cap") -> int:
    """An operator's or a stored cap: an integer (not a bool) within the controller's bounds."""
    if isinstance(cap, bool) or not isinstance(cap, int) or not low <= cap <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {cap!r}")
    return cap


def stored_bool(data: Mapping[str, Any], name: str) -> bool:
    value = data[name]
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def stored_count(data: Mapping[str, Any], name: str) -> int:
    """An integer >= 0."""
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return value


def stored_optional_count(data: Mapping[str, Any], name: str) -> int | None:
    """An integer >= 0, or None (stored as null)."""
    return None if data[name] is None else stored_count(data, name)


def stored_number(data: Mapping[str, Any], name: str, *, low: float | None = None) -> float:
    """A finite number (an int or a float, never a string or a bool), at least ``low``."""
    value = data[name]
    number = finite(value)
    if number is None or (low is not None and number < low):
        bound = "" if low is None else f" >= {low:g}"
        raise ValueError(f"{name} must be a finite number{bound}, got {value!r}")
    return number


def stored_optional_number(
    data: Mapping[str, Any], name: str, *, low: float | None = None
) -> float | None:
    """A finite number at least ``low``, or None (stored as null)."""
    return None if data[name] is None else stored_number(data, name, low=low)


def stored_usages(data: Mapping[str, Any], name: str) -> list[float]:
    """A list of usage fractions, each a finite number in [0, 1]."""
    return stored_numbers(data, name, low=0.0, high=1.0)


def stored_fields(stored: object, what: str, names: tuple[str, ...]) -> tuple[float, ...] | None:
    """Null, or a list of numbers >= 0 stored by position: one per name, each refused under
    its own name (``what`` and the field's), so a bad one says which it is."""
    if stored is None:
        return None
    if not isinstance(stored, list) or len(stored) != len(names):
        raise ValueError(f"{what} must be null or [{', '.join(names)}], got {stored!r}")
    fields = {f"{what} {name}": value for name, value in zip(names, stored, strict=True)}
    return tuple(stored_number(fields, f"{what} {name}", low=0.0) for name in names)


def stored_numbers(
    data: Mapping[str, Any], name: str, *, low: float, high: float = math.inf
) -> list[float]:
    """A list of finite numbers, each in [``low``, ``high``]."""
    value = data[name]
    numbers = [finite(v) for v in value] if isinstance(value, list) else [None]
    if not all(n is not None and low <= n <= high for n in numbers):
        bounds = f"in [{low:g}, {high:g}]" if math.isfinite(high) else f">= {low:g}"
        raise ValueError(f"{name} must be a list of numbers {bounds}, got {value!r}")
    return [n for n in numbers if n is not None]


def finite(value: object) -> float | None:
    """The value as a finite float; None for anything else, an integer too large for a float
    included (JSON has no bound on integers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
