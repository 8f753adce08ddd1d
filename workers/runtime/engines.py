"""The engines a run talks to: their specs, and the checks made before anything starts.

A config names engines by URL (or by the name of an engine registered in the database, which
the caller resolves first). Before a run starts, every engine must answer ``/v1/models`` and
serve the config's model; ``model = "auto"`` takes the one base model they all serve. Each
failure is a field error at the config path it concerns, so a run that cannot work is refused
with a reason instead of failing every episode.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from inference.metrics.endpoints import EngineSpec
from workers.core.config.fields import ConfigError, FieldError
from workers.core.config.run import AUTO_MODEL, EngineSettings, RunConfig

logger = logging.getLogger(__name__)

PREFLIGHT_TIMEOUT_S = 5.0  # an engine that cannot list its models in 5 s is not serving


@dataclass(frozen=True, slots=True)
class ServedModels:
    """What one engine's ``/v1/models`` lists."""

    base: tuple[str, ...]  # models without a parent: what "auto" may choose
    all: tuple[str, ...]  # base models and LoRA adapters: what a request may name


def engine_specs(
    engines: Sequence[EngineSettings], names: Sequence[str | None] | None = None
) -> list[EngineSpec]:
    """One monitor spec per configured engine, named ``host:port`` unless the caller knows
    its registered name. Engines given by name must have been resolved to a URL already."""
    specs: list[EngineSpec] = []
    for index, engine in enumerate(engines):
        if engine.url is None:
            raise ValueError(f"engine[{index}] ({engine.name!r}) has no URL: resolve names first")
        name = (names[index] if names else None) or engine.name or _host_port(engine.url)
        specs.append(EngineSpec(name, engine.url.rstrip("/"), engine.role, engine.max_num_seqs))
    return specs


async def preflight(config: RunConfig, specs: Sequence[EngineSpec], http: httpx.AsyncClient) -> str:
    """The served model name the run will use; ConfigError naming each engine that does not
    answer and the model field when the engines do not serve it."""
    answers = await asyncio.gather(*(_served(spec, http) for spec in specs))
    errors = [
        FieldError(f"engine[{index}].url", answer)
        for index, answer in enumerate(answers)
        if isinstance(answer, str)
    ]
    if errors:
        raise ConfigError(errors)
    served = [answer for answer in answers if isinstance(answer, ServedModels)]
    return _choose_model(config.model, specs, served)


def _choose_model(wanted: str, specs: Sequence[EngineSpec], served: list[ServedModels]) -> str:
    listing = "; ".join(
        f"{spec.name} serves {list(s.all)}" for spec, s in zip(specs, served, strict=True)
    )
    if wanted == AUTO_MODEL:
        common = set(served[0].base).intersection(*(s.base for s in served[1:]))
        if len(common) == 1:
            return common.pop()
        why = "they serve no base model in common" if not common else "they serve several"
        raise ConfigError(
            [
                FieldError(
                    "model",
                    f"'auto' needs one model every engine serves, but {why} ({listing}): name it",
                )
            ]
        )
    missing = [spec.name for spec, s in zip(specs, served, strict=True) if wanted not in s.all]
    if missing:
        raise ConfigError(
            [FieldError("model", f"{wanted!r} is not served by {', '.join(missing)} ({listing})")]
        )
    return wanted


async def _served(spec: EngineSpec, http: httpx.AsyncClient) -> ServedModels | str:
    url = f"{spec.base_url}/v1/models"
    try:
        response = await http.get(url, timeout=PREFLIGHT_TIMEOUT_S)
    except httpx.HTTPError as failed:
        return _no_models(url, f"{type(failed).__name__}: {failed}".rstrip(": "))
    if not response.is_success:
        return _no_models(url, f"HTTP {response.status_code}")
    try:
        entries = response.json()["data"]
        models = [(str(e["id"]), e.get("parent")) for e in entries]
    except (ValueError, KeyError, TypeError) as bad:
        return _no_models(url, f"not a model list ({type(bad).__name__})")
    if not models:
        return f"{url} serves no model"
    base = tuple(name for name, parent in models if not parent)
    return ServedModels(
        base or tuple(name for name, _ in models), tuple(name for name, _ in models)
    )


def _no_models(url: str, why: str) -> str:
    """One answer for every way an engine fails to list its models, with why in the log only:
    the web process asks at an operator's word, and what it answers must not tell a closed
    port from an open one, nor show what a server that is no engine says."""
    logger.warning("engine check: %s gave no model list: %s", url, why)
    return f"{url} did not answer with a list of models (the log says why)"


def _host_port(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc or url
