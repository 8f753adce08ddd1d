"""Exposition text in, one validated reading per engine out. Pure; no clock, no I/O.

The text is tokenised by prometheus_client's parser; this module only decides which samples
mean what. That parser costs some 20 us a line in pure Python, and an engine exposes over 400
series of which Pacer reads about 80, so the other lines are dropped by name first (a cheap
string split) and only the rest is parsed. Comment lines go too: the name table already says
what each sample is, whether a counter carries ``_total`` or not.

Counters and histograms also carry the time they were made, as ``<name>_created`` samples;
each is read into the reading's ``created`` so a restart can be told apart from growth.

One vLLM server can host several data-parallel engines, told apart by the ``engine`` label.
A series without that label belongs to the whole server and fills in what a rank does not
report itself (labelled values win). Every labelled engine's id is ``<endpoint>/<engine label>``,
even when a scrape shows a single one: an id that hung on how many ranks one scrape shows would
rename a rank whose sibling vanished, and its counter deltas would restart from nothing. Only
an exposition with no ``engine`` label at all is one engine named after the endpoint.
"""

from __future__ import annotations

import functools
import json
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from inference.metrics import names
from inference.metrics.errors import ScrapeBadFormat
from inference.metrics.histograms import Histogram
from inference.metrics.names import Series, SeriesKind
from inference.metrics.readings import COUNTER_SERIES, Counters, EngineReading

_SAMPLE_NAMES = names.sample_names()
_CREATED_NAMES = names.created_names()
_EXCERPT_CHARS = 80  # enough of a bad body to recognise it in an error message
# Per engine rank, one info line and eight created stamps (names.created_names: five counters,
# three histograms); for 1024 ranks, more than any one pool holds.
_CONSTANT_CACHE_LINES = 9 * 1024


@dataclass(frozen=True, slots=True)
class _Row:
    """One sample of a series Pacer reads."""

    rank: int  # spelling rank from names.NAMES; lower is newer
    labels: Mapping[str, str]
    value: float


_Rows = dict[Series, list[_Row]]


@dataclass(frozen=True, slots=True)
class _Samples:
    """The rows of one engine label (or of none): values, and when each series was made."""

    values: _Rows = field(default_factory=lambda: defaultdict(list))
    created: _Rows = field(default_factory=lambda: defaultdict(list))


def parse_exposition(text: str, endpoint: str) -> dict[str, EngineReading]:
    """Read every engine an exposition describes, keyed by engine id.

    Raises ScrapeBadFormat, naming the offending series or an excerpt of the body, when the
    text is not Prometheus text, holds a non-finite or out-of-range value where Pacer reads,
    or lacks a series the controller needs.
    """
    if not text.strip():
        raise ScrapeBadFormat("empty body: no metrics exposed")
    if text.lstrip().startswith("<"):
        raise ScrapeBadFormat(f"an HTML page, not Prometheus text: {_excerpt(text)}")
    per_engine = _collect(text)
    labelled = sorted(key for key in per_engine if key is not None)
    shared = per_engine.get(None, _Samples())
    if not labelled:
        return {endpoint: _reading(shared.values, shared.created)}
    return {
        f"{endpoint}/{label}": _reading(
            {**shared.values, **per_engine[label].values},
            {**shared.created, **per_engine[label].created},
        )
        for label in labelled
    }


def parse_max_model_len(body: bytes) -> int:
    """The context length an episode must fit, from ``GET /v1/models``.

    A server may list several models (a base model and its LoRA adapters); the smallest
    length is the one every request is sure to fit. vLLM lists an adapter with
    ``"max_model_len": null``: an adapter runs on its base model and has no length of its own,
    so only the lengths stated count. Any stated length must still be a positive whole number,
    since a garbled one could be the smallest.
    """
    try:
        payload = json.loads(body)
        lengths = [entry["max_model_len"] for entry in payload["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ScrapeBadFormat(f"/v1/models is not a model list: {_excerpt(body)}") from exc
    stated = [n for n in lengths if n is not None]
    if not stated:
        raise ScrapeBadFormat(f"/v1/models states no max_model_len: {lengths}")
    if not all(type(n) is int and n > 0 for n in stated):
        raise ScrapeBadFormat(f"/v1/models lists a max_model_len that is not positive: {lengths}")
    return min(stated)


def _collect(text: str) -> dict[str | None, _Samples]:
    """Group the samples Pacer reads by engine label (None: no label) and series."""
    per_engine: dict[str | None, _Samples] = defaultdict(_Samples)
    lines, constant_lines = _wanted_lines(text)
    try:
        samples = [s for f in text_string_to_metric_families("\n".join(lines)) for s in f.samples]
        for line in constant_lines:
            samples += _parse_constant_line(line)
    except (ValueError, IndexError, TypeError) as exc:
        raise ScrapeBadFormat(f"not Prometheus text: {exc} in {_excerpt(text)}") from exc
    for sample in samples:
        # The line filter reads a name up to a space or tab, the parser up to the brace: a name
        # garbled by a gap (``vllm:num_preemptions _total{...}``) passes the one and comes out
        # of the other as a name Pacer does not know.
        created = _CREATED_NAMES.get(sample.name)
        known = created or _SAMPLE_NAMES.get(sample.name)
        if known is None:
            raise ScrapeBadFormat(f"not Prometheus text: garbled sample name {sample.name!r}")
        series, rank = known
        value = float(sample.value)
        if not math.isfinite(value):
            raise ScrapeBadFormat(f"{sample.name}{sample.labels} is {value}, not finite")
        engine = per_engine[sample.labels.get(names.ENGINE_LABEL) or None]
        rows = engine.created if created else engine.values
        rows[series].append(_Row(rank, sample.labels, value))
    return per_engine


def _wanted_lines(text: str) -> tuple[list[str], list[str]]:
    """The sample lines Pacer reads, found by the name before ``{`` or the first space.

    Lines whose text stays the same for the engine's life (info lines, created stamps) come
    apart from the rest, to be parsed through a cache.
    """
    lines, constant_lines = [], []
    for line in text.splitlines():
        line = line.strip()
        name = line.partition("{")[0].partition(" ")[0].partition("\t")[0]
        if name in _CREATED_NAMES:
            constant_lines.append(line)
        elif (known := _SAMPLE_NAMES.get(name)) is not None:
            (constant_lines if names.KINDS[known[0]] is SeriesKind.INFO else lines).append(line)
    return lines, constant_lines


@functools.lru_cache(maxsize=_CONSTANT_CACHE_LINES)
def _parse_constant_line(line: str) -> tuple[Sample, ...]:
    """One line's samples, memoized, for lines that repeat every poll of an engine's life.

    ``cache_config_info`` carries some 40 labels, which makes it the costliest line to parse
    (about a tenth of a whole scrape), yet it is configuration; a created stamp changes only
    with a restart. Parsed alone, each stamp would also cost a family of its own.
    """
    return tuple(s for f in text_string_to_metric_families(line) for s in f.samples)


def _reading(rows: _Rows, created: _Rows) -> EngineReading:
    missing = sorted(s.value for s in names.REQUIRED if s not in rows)
    if missing:
        raise ScrapeBadFormat(f"not a vLLM exposition: missing {', '.join(missing)}")
    best = {series: _newest(found) for series, found in rows.items()}
    usage = max(row.value for row in best[Series.KV_USAGE])
    if not 0.0 <= usage <= 1.0:
        raise ScrapeBadFormat(f"KV cache usage {usage} is outside 0..1")
    by_reason = _by_reason(best.get(Series.WAITING_BY_REASON))
    return EngineReading(
        kv_usage=usage,
        num_running=_count(best[Series.RUNNING], Series.RUNNING),
        num_waiting=_count(best[Series.WAITING], Series.WAITING),
        num_waiting_capacity=by_reason.get(names.REASON_CAPACITY) if by_reason else None,
        num_waiting_deferred=by_reason.get(names.REASON_DEFERRED) if by_reason else None,
        kv_capacity_tokens=_capacity(best.get(Series.CACHE_CONFIG)),
        counters=_counters(best),
        histograms={
            series: _histogram(found, series)
            for series, found in best.items()
            if names.KINDS[series] is SeriesKind.HISTOGRAM
        },
        created=_created(created),
    )


def _created(rows: _Rows) -> dict[Series, float]:
    """When each series was made: the earliest stamp of its rows.

    A row that appears later in an engine's life (a label value first used) must not move it;
    a restart moves every row, so it moves the earliest too.
    """
    return {series: min(row.value for row in _newest(found)) for series, found in rows.items()}


def _newest(rows: list[_Row]) -> list[_Row]:
    """Keep the newest spelling's rows: a transitional vLLM exposes old and new names."""
    rank = min(row.rank for row in rows)
    return [row for row in rows if row.rank == rank]


def _count(rows: list[_Row], series: Series) -> int:
    """Sum a count over the rows (one per model name) and insist on a whole, non-negative one."""
    total = sum(row.value for row in rows)
    if total < 0 or not total.is_integer():
        raise ScrapeBadFormat(f"{series.value} is {total}, not a whole non-negative count")
    return int(total)


def _by_reason(rows: list[_Row] | None) -> dict[str, int] | None:
    if rows is None:
        return None
    grouped: dict[str, list[_Row]] = defaultdict(list)
    for row in rows:
        grouped[row.labels.get(names.REASON_LABEL, "")].append(row)
    return {reason: _count(found, Series.WAITING_BY_REASON) for reason, found in grouped.items()}


def _counters(best: Mapping[Series, list[_Row]]) -> Counters:
    """Totals of the counters present; an absent one reads 0 and so never moves."""
    values: dict[str, float] = {}
    for series, attribute in COUNTER_SERIES.items():
        total = sum(row.value for row in best.get(series, ()))
        if total < 0:
            raise ScrapeBadFormat(f"counter {series.value} is negative: {total}")
        values[attribute] = total
    return Counters(**values)


def _capacity(rows: list[_Row] | None) -> int | None:
    """KV size in tokens: the engine's own token count first, then blocks x block size.

    The override is preferred over ``num_gpu_blocks``, which some versions report from
    profiling even when the override set the real size.
    """
    if not rows:
        return None
    labels = rows[0].labels
    tokens = _positive_int(labels, names.KV_TOKENS_LABEL)
    if tokens is not None:
        return tokens
    block_size = _positive_int(labels, names.BLOCK_SIZE_LABEL)
    blocks = _positive_int(labels, names.BLOCKS_OVERRIDE_LABEL) or _positive_int(
        labels, names.BLOCKS_LABEL
    )
    if block_size is None or blocks is None:
        return None
    return blocks * block_size


def _positive_int(labels: Mapping[str, str], name: str) -> int | None:
    """A size label such as "2048"; None for any other value ("None" is vLLM's "not known
    yet"), so an odd info label costs the capacity figure, never the engine's whole sample.

    Only ASCII digits are a size: ``str.isdigit`` also passes "²", which ``int`` rejects, and
    "٣", which ``int`` reads as 3.
    """
    label = labels.get(name)
    if label is None or not (label.isascii() and label.isdigit()):
        return None
    value = int(label)
    return value if value > 0 else None


def _histogram(rows: list[_Row], series: Series) -> Histogram:
    buckets: dict[float, float] = defaultdict(float)
    for row in rows:
        try:
            buckets[float(row.labels[names.BUCKET_LABEL])] += row.value
        except (KeyError, ValueError) as exc:
            raise ScrapeBadFormat(f"{series.value} bucket has no valid bound") from exc
    bounds = tuple(sorted(buckets))
    try:
        return Histogram(bounds, tuple(buckets[b] for b in bounds))
    except ValueError as exc:
        raise ScrapeBadFormat(f"{series.value} is not a valid histogram: {exc}") from exc


def _excerpt(body: str | bytes) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    head = text.strip()[:_EXCERPT_CHARS]
    return repr(head + ("..." if len(text.strip()) > _EXCERPT_CHARS else ""))
