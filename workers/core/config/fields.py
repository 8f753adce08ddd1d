"""Reading a parsed config document (TOML or JSON) into typed values.

Every error is collected, each with the path of its field (``concurrency.pacer.trim_kv_usage``,
``env[1].args.turns``), so a person fixing a config sees all of it at once, and the REST API can
answer with field errors. Keys nobody read are errors too: a misspelt threshold that silently
keeps its default is the worst kind of config bug.

    errors = Errors()
    top = Table(document, "", errors)
    batch = top.integer("batch_size", default=64, low=1)
    top.finish()
    errors.raise_if_any()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from workers.core.validation import finite

T = TypeVar("T")
MISSING: Any = object()  # "no default": the key is required


@dataclass(frozen=True, slots=True)
class FieldError:
    path: str  # dotted path of the field; "" for the document as a whole
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(ValueError):
    """A config with one or more field errors; ``errors`` lists them all."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        self.errors = tuple(errors)
        super().__init__("; ".join(str(error) for error in self.errors))

    @classmethod
    def single(cls, message: str, path: str = "") -> ConfigError:
        return cls([FieldError(path, message)])

    def by_field(self) -> dict[str, list[str]]:
        """Messages per path, as an API's field errors are shaped."""
        found: dict[str, list[str]] = {}
        for error in self.errors:
            found.setdefault(error.path or "config", []).append(error.message)
        return found


class Errors:
    """The errors of one reading, shared by every table of the document."""

    def __init__(self) -> None:
        self.found: list[FieldError] = []

    def add(self, path: str, message: str) -> None:
        self.found.append(FieldError(path, message))

    def extend(self, prefix: str, error: ConfigError) -> None:
        """Take another reading's errors, their paths under ``prefix``."""
        for inner in error.errors:
            self.add(join(prefix, inner.path), inner.message)

    def raise_if_any(self) -> None:
        if self.found:
            raise ConfigError(self.found)


def join(prefix: str, key: str) -> str:
    if not prefix:
        return key
    if not key:
        return prefix
    return f"{prefix}{key}" if key.startswith("[") else f"{prefix}.{key}"


class Table:
    """One table of the document. Each read checks one key; ``finish`` reports the keys no
    read asked for. A read that fails records its error and returns the default (or None),
    so reading goes on and every error of the document is found in one pass."""

    def __init__(self, data: object, path: str, errors: Errors) -> None:
        self.path = path
        self.errors = errors
        self._seen: set[str] = set()
        if isinstance(data, Mapping):
            self._data: Mapping[str, Any] = data
        else:
            self._data = {}
            errors.add(path, f"must be a table (an object), got {_shown(data)}")

    def has(self, key: str) -> bool:
        return key in self._data

    def raw(self, key: str, default: Any = MISSING) -> Any:
        """The value as it is, for a reader of its own (an environment's args)."""
        self._seen.add(key)
        if key in self._data:
            return self._data[key]
        if default is MISSING:
            self.errors.add(join(self.path, key), "is required")
            return None
        return default

    def string(
        self, key: str, default: Any = MISSING, *, choices: Sequence[str] | None = None
    ) -> Any:
        value = self.raw(key, default)
        if value is None or (value is default and default is not MISSING):
            return value
        if not isinstance(value, str) or not value:
            return self._bad(key, default, f"must be a non-empty string, got {_shown(value)}")
        if choices is not None and value not in choices:
            known = ", ".join(repr(c) for c in choices)
            return self._bad(key, default, f"must be one of {known}, got {value!r}")
        return value

    def integer(
        self, key: str, default: Any = MISSING, *, low: int | None = None, high: int | None = None
    ) -> Any:
        value = self.raw(key, default)
        if value is None or (value is default and default is not MISSING):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            return self._bad(key, default, f"must be an integer, got {_shown(value)}")
        return self._bounded(key, value, default, low, high)

    def number(
        self,
        key: str,
        default: Any = MISSING,
        *,
        low: float | None = None,
        high: float | None = None,
    ) -> Any:
        value = self.raw(key, default)
        if value is None or (value is default and default is not MISSING):
            return value
        number = finite(value)
        if number is None:
            return self._bad(key, default, f"must be a finite number, got {_shown(value)}")
        return self._bounded(key, number, default, low, high)

    def boolean(self, key: str, default: Any = MISSING) -> Any:
        value = self.raw(key, default)
        if value is None or (value is default and default is not MISSING):
            return value
        if not isinstance(value, bool):
            return self._bad(key, default, f"must be true or false, got {_shown(value)}")
        return value

    def table(self, key: str) -> Table:
        """A nested table; absent, an empty one (every field takes its default)."""
        return Table(self.raw(key, {}), join(self.path, key), self.errors)

    def tables(self, key: str) -> list[Table]:
        """An array of tables (``[[env]]`` in TOML, a list of objects in JSON)."""
        value = self.raw(key, [])
        if not isinstance(value, list):
            self.errors.add(join(self.path, key), f"must be a list of tables, got {_shown(value)}")
            return []
        return [
            Table(item, f"{join(self.path, key)}[{i}]", self.errors) for i, item in enumerate(value)
        ]

    def dataclass(
        self, cls: Callable[..., T], key: str, *, retired: Mapping[str, str] | None = None
    ) -> T | None:
        """A config dataclass of the core from the nested table ``key`` (see ``read_into``).
        ``retired`` names settings an older version read, each with what replaced it: a
        config that still sets one is told that, not only that the key is unknown."""
        table = self.table(key)
        for name, successor in (retired or {}).items():
            if table.has(name):
                table.raw(name)
                table.errors.add(join(table.path, name), f"is retired ({successor})")
        made = read_into(cls, table)
        table.finish()
        return made

    def typed(self, key: str, annotation: object) -> Any:
        """A value read by a dataclass field's annotation: ``int``, ``float``, ``bool`` or
        ``str``, or an optional one (JSON's null keeps the field unset)."""
        text = str(annotation)
        if "None" in text and self.raw(key) is None:
            return None
        for prefix, read in (
            ("int", self.integer),
            ("float", self.number),
            ("bool", self.boolean),
            ("str", self.string),
        ):
            if text.startswith(prefix):
                return read(key)
        return self.raw(key)

    def finish(self) -> None:
        """Report every key no read asked for, with the keys this table knows."""
        unknown = [key for key in self._data if key not in self._seen]
        for key in unknown:
            known = ", ".join(sorted(self._seen)) or "none"
            self.errors.add(join(self.path, str(key)), f"unknown key (known here: {known})")

    def _bounded(
        self, key: str, value: T, default: Any, low: float | None, high: float | None
    ) -> Any:
        if low is not None and value < low:  # type: ignore[operator]
            return self._bad(key, default, f"must be >= {low:g}, got {value}")
        if high is not None and value > high:  # type: ignore[operator]
            return self._bad(key, default, f"must be <= {high:g}, got {value}")
        return value

    def _bad(self, key: str, default: Any, message: str) -> Any:
        self.errors.add(join(self.path, key), message)
        return None if default is MISSING else default


def read_into(cls: Callable[..., T], table: Table) -> T | None:
    """A frozen config dataclass of the core, from those of its fields ``table`` has; the
    rest keep their defaults. The dataclass's own checks judge the values, so a threshold is
    validated by exactly the rule the core runs with, and a message that starts with a field's
    name (as ``check_range``'s do) is reported at that field. None when anything failed."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    failed = False
    for name, field in fields.items():
        if not table.has(name):
            continue
        before = len(table.errors.found)
        value = table.typed(name, field.type)
        if len(table.errors.found) > before:
            failed = True
        else:
            values[name] = value
    if failed:
        return None
    try:
        return cls(**values)
    except ValueError as refused:
        name, _, rest = str(refused).partition(" ")
        if name in fields and rest:
            table.errors.add(join(table.path, name), rest)
        else:
            table.errors.add(table.path, str(refused))
    return None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
