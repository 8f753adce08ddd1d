"""Formatting for the dashboard's templates: numbers as an operator reads them at a glance."""

from __future__ import annotations

import json

from django import template

register = template.Library()


@register.filter
def rate(value: float | None) -> str:
    """Tokens per second with a k or M suffix: 1234.5 -> 1.2k."""
    if value is None:
        return "-"
    number = float(value)
    for limit, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(number) >= limit:
            return f"{number / limit:.1f}{suffix}"
    return f"{number:.0f}"


@register.filter
def pretty(document: object) -> str:
    """A stored JSON document as indented text, for the config panel."""
    return json.dumps(document, indent=2, sort_keys=False)


@register.filter
def config_value(value: object) -> str:
    """A config field's value in the differences table: text as it is, any other value as
    JSON (so ``null``, ``true`` and ``1`` read as the config wrote them)."""
    return value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))
