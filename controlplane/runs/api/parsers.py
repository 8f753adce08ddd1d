"""Request bodies: JSON everywhere, TOML too where a run config is given.

Both read at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes: the middleware refuses a declared
larger body before it is read, and this bounds the read whatever the stream holds.
"""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from controlplane.runs.api.exceptions import PayloadTooLarge


def read_bounded(stream: IO[bytes] | None) -> bytes:
    if stream is None:
        return b""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge()
    return data


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as bad:
        raise ParseError(f"the {what} body is not UTF-8: {bad}") from None


class BoundedJSONParser(BaseParser):
    media_type = "application/json"

    def parse(
        self,
        stream: IO[bytes] | None,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        text = _text(read_bounded(stream), "JSON")
        try:
            # Python's json reads NaN and Infinity, which no JSON client means to send.
            return json.loads(text, parse_constant=_refuse_constant, parse_int=_whole_number)
        except ValueError as bad:
            raise ParseError(f"the JSON does not parse: {bad}") from None
        except RecursionError:
            raise ParseError("the JSON nests too deep to be a config") from None


class TOMLParser(BaseParser):
    media_type = "application/toml"

    def parse(
        self,
        stream: IO[bytes] | None,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        text = _text(read_bounded(stream), "TOML")
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as bad:
            raise ParseError(f"the TOML does not parse: {bad}") from None
        except ValueError:  # tomllib's one unwrapped ValueError: int() of too many digits
            raise ParseError(f"the TOML does not parse: {_too_many_digits()}") from None
        except RecursionError:
            raise ParseError("the TOML nests too deep to be a config") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _whole_number(digits: str) -> int:
    """An integer as json reads it, with a message of Pacer's own for one too long to read."""
    if len(digits.lstrip("-")) > sys.get_int_max_str_digits():
        raise ValueError(_too_many_digits())
    return int(digits)


def _too_many_digits() -> str:
    """Python reads no integer of more digits than this (a guard against quadratic time)."""
    return f"a number has more than {sys.get_int_max_str_digits()} digits"
