"""What the API reads: query parameters and request bodies, each checked field by field so a
bad one is a 400 naming the field, never a 500 from deeper down."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime
from django.utils.timezone import is_naive, make_aware
from rest_framework import serializers

from controlplane.runs.compare import MAX_RUNS, MIN_RUNS
from controlplane.runs.models import IDEMPOTENCY_KEY_MAX_LENGTH, Engine, OverrideMode, RunState
from controlplane.runs.services import MAX_OVERRIDE_CAP
from workers.core.config.fields import ConfigError, FieldError
from workers.core.controller.overrides import MAX_PIN_TTL_S
from workers.core.decisions import DecisionKind
from workers.core.members import DEFAULT_DRAIN_S, MAX_DRAIN_S
from workers.core.sharing import PRIORITY_RANGE, SHARE_RANGE

# A config deeper than this is no config: the schema's deepest table is four levels down.
MAX_CONFIG_DEPTH = 32
MAX_ROW_ID = 2**63 - 1  # the largest id PostgreSQL's bigint holds

IDEMPOTENCY_HEADER = "Idempotency-Key"
# Printable ASCII without spaces: what a UUID, a hash or a client's own counter is written in,
# and what any proxy passes on unchanged.
IDEMPOTENCY_KEY_PATTERN = rf"^[!-~]{{1,{IDEMPOTENCY_KEY_MAX_LENGTH}}}$"
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


class CommaSeparatedChoices(serializers.CharField):
    """``state=running,paused``: a list of choices in one query parameter."""

    def __init__(self, choices: list[str], **kwargs: Any) -> None:
        self.allowed = choices
        kwargs.setdefault("help_text", f"comma-separated, any of: {', '.join(choices)}")
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> list[str]:  # type: ignore[override]
        text = super().to_internal_value(data)
        values = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [v for v in values if v not in self.allowed]
        if unknown:
            raise serializers.ValidationError(
                f"unknown: {', '.join(unknown)}; any of: {', '.join(self.allowed)}"
            )
        return values


class RunFilters(serializers.Serializer):
    state = CommaSeparatedChoices(RunState.values, required=False)
    name = serializers.CharField(required=False, max_length=200, help_text="contains, any case")
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)


class DecisionFilters(serializers.Serializer):
    kind = CommaSeparatedChoices([k.value for k in DecisionKind], required=False)
    since = serializers.CharField(
        required=False,
        max_length=64,
        help_text="an ISO 8601 time (decisions after it) or a decision id (decisions after "
        "that one, to resume where a client stopped)",
    )

    def validate_since(self, value: str) -> datetime | int:
        if value.isascii() and value.isdigit():
            number = int(value)
            if number > MAX_ROW_ID:
                raise serializers.ValidationError("is larger than any decision id")
            return number
        try:
            moment = parse_datetime(value)
        except ValueError:
            moment = None
        if moment is None:
            raise serializers.ValidationError("must be an ISO 8601 time or a decision id")
        moment = make_aware(moment) if is_naive(moment) else moment
        try:
            moment.astimezone(UTC)  # what the database compares it as
        except OverflowError:
            raise serializers.ValidationError("is outside the years 1 to 9999 in UTC") from None
        return moment


class StepFilters(serializers.Serializer):
    # A step number is a PositiveIntegerField: at most 2**31 - 1 on every database.
    after = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=2**31 - 1,
        help_text="only the steps after this one: a page that has steps up to N reads the "
        "rest with after=N",
    )


class SampleFilters(serializers.Serializer):
    engine = serializers.CharField(
        required=False, max_length=2000, help_text="comma-separated engine ids"
    )
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
    step_s = serializers.FloatField(
        required=False,
        min_value=0.001,
        max_value=30 * 86400.0,
        help_text="the bin width; by default the smallest nice one giving at most "
        "PACER_SAMPLES_MAX_POINTS points per engine",
    )

    def validate_engine(self, value: str) -> list[str]:
        return [part.strip() for part in value.split(",") if part.strip()]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        since, until = attrs.get("since"), attrs.get("until")
        if since is not None and until is not None and until <= since:
            raise serializers.ValidationError({"until": "must be after since"})
        return attrs


class CompareFilters(serializers.Serializer):
    runs = serializers.CharField(
        max_length=200,
        help_text=f"{MIN_RUNS} to {MAX_RUNS} run ids, comma-separated, each once: runs=3,7",
    )

    def validate_runs(self, value: str) -> list[int]:
        parts = [part.strip() for part in value.split(",")]
        if not all(part.isascii() and part.isdigit() for part in parts):
            raise serializers.ValidationError(
                f"must be run ids separated by commas (runs=3,7), got {value!r}"
            )
        ids = [int(part) for part in parts]
        if any(pk > MAX_ROW_ID for pk in ids):
            raise serializers.ValidationError("holds a number larger than any run id")
        if len(set(ids)) != len(ids):
            raise serializers.ValidationError("names a run more than once")
        if not MIN_RUNS <= len(ids) <= MAX_RUNS:
            raise serializers.ValidationError(
                f"compares {MIN_RUNS} to {MAX_RUNS} runs, got {len(ids)}"
            )
        return ids


class ExportFilters(serializers.Serializer):
    format = serializers.ChoiceField(choices=["csv", "json"], default="json")


class OverrideInput(serializers.Serializer):
    """A cap command: pin (cap and ttl_s), set (cap), release (neither)."""

    mode = serializers.ChoiceField(choices=list(OverrideMode.cap_commands()))
    cap = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_OVERRIDE_CAP
    )
    ttl_s = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=0.001,
        max_value=MAX_PIN_TTL_S,
        help_text=f"how long a pin holds, at most {MAX_PIN_TTL_S:g} s (a week)",
    )
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        mode, cap, ttl = attrs["mode"], attrs.get("cap"), attrs.get("ttl_s")
        errors: dict[str, str] = {}
        if mode in (OverrideMode.PIN, OverrideMode.SET) and cap is None:
            errors["cap"] = f"a {mode} needs a cap"
        if mode == OverrideMode.RELEASE and cap is not None:
            errors["cap"] = "a release takes no cap"
        if mode == OverrideMode.PIN and ttl is None:
            errors["ttl_s"] = "a pin needs ttl_s"
        if mode != OverrideMode.PIN and ttl is not None:
            errors["ttl_s"] = "only a pin takes ttl_s"
        bounds = self.context.get("cap_bounds")
        if cap is not None and bounds is not None and "cap" not in errors:
            low, high = bounds
            if not low <= cap <= high:
                errors["cap"] = (
                    f"must be within this run's min_inflight..max_inflight [{low}, {high}], "
                    f"got {cap}"
                )
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class EngineAddInput(serializers.Serializer):
    engine = serializers.CharField(
        max_length=500, help_text="a registered engine's name, or an engine's URL"
    )
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class EngineRemoveInput(serializers.Serializer):
    drain_s = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=0.0,
        max_value=MAX_DRAIN_S,
        help_text=f"how long the episodes on it may run on (default {DEFAULT_DRAIN_S:g} s); "
        "what is left then is cancelled",
    )
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class ShareInput(serializers.Serializer):
    share = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=SHARE_RANGE[0],
        max_value=SHARE_RANGE[1],
        help_text="the run's weight among the runs sharing its engines",
    )
    priority = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=PRIORITY_RANGE[0],
        max_value=PRIORITY_RANGE[1],
        help_text="higher is served first",
    )
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("share") is None and attrs.get("priority") is None:
            raise serializers.ValidationError({"share": "give a share, a priority or both"})
        return attrs


class CommandInput(serializers.Serializer):
    """Stop, pause or resume: why, for the record."""

    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class AckInput(serializers.Serializer):
    policy_version = serializers.IntegerField(min_value=0, max_value=2**31 - 1)
    checkpoint = serializers.CharField(
        required=False,
        max_length=1000,
        trim_whitespace=False,
        help_text=(
            "the folder of the new version's weights: a Hugging Face model folder (config.json,"
            " *.safetensors or model.safetensors.index.json with its shards) inside the run's"
            " folder or PACER_CHECKPOINTS_DIR; relative to that folder unless absolute"
        ),
    )


class EngineInput(serializers.ModelSerializer):
    """Create an engine (its name is fixed then), or change its URL, role or max_num_seqs."""

    class Meta:
        model = Engine
        fields = ["name", "url", "role", "max_num_seqs"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance is not None:
            self.fields["name"].read_only = True


def idempotency_key(headers: Mapping[str, str]) -> str | None:
    """The request's ``Idempotency-Key`` (None without one); a 400 at the header for one that
    is empty, too long, or has spaces or characters past ASCII."""
    key = headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return None
    if _IDEMPOTENCY_KEY.fullmatch(key) is None:
        raise serializers.ValidationError(
            {
                IDEMPOTENCY_HEADER: [
                    f"must be 1 to {IDEMPOTENCY_KEY_MAX_LENGTH} printable ASCII characters "
                    "without spaces (a UUID, say)"
                ]
            }
        )
    return key


def check_storable(document: Any) -> None:
    """ConfigError for what the database cannot store however the schema reads it: NUL
    characters and lone surrogates in strings, numbers that are not finite, nesting deeper
    than MAX_CONFIG_DEPTH (the schema reads only known keys; arguments of an environment are
    stored as given)."""
    errors: list[FieldError] = []
    _walk(document, "", 0, errors)
    if errors:
        raise ConfigError(errors[:20])


def _walk(value: Any, path: str, depth: int, errors: list[FieldError]) -> None:
    if depth > MAX_CONFIG_DEPTH:
        errors.append(FieldError(path, f"nests deeper than {MAX_CONFIG_DEPTH} levels"))
        return
    if isinstance(value, str):
        if _unstorable(value):
            errors.append(FieldError(path, "holds a NUL character or a lone surrogate"))
    elif isinstance(value, float):
        if not math.isfinite(value):
            errors.append(FieldError(path, f"must be a finite number, got {value}"))
    elif isinstance(value, int) and not isinstance(value, bool):
        if abs(value) >= 2**63:
            errors.append(FieldError(path, "is larger than a 64-bit integer"))
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            name = str(key)
            if _unstorable(name):
                errors.append(FieldError(path, "a key holds a NUL character or a lone surrogate"))
                continue
            _walk(inner, f"{path}.{name}" if path else name, depth + 1, errors)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            _walk(inner, f"{path}[{index}]", depth + 1, errors)
    elif value is not None and not isinstance(value, bool):  # a TOML date, say
        errors.append(FieldError(path, f"must be a string, number, table or list, got {value!r}"))


def _unstorable(text: str) -> bool:
    if "\x00" in text:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
