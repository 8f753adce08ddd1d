"""The example configs in configs/ stay valid: each one the README points at must pass the
schema and name only environments that exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.core.config.run import parse_run_config_text

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs").glob("*.toml"))


def test_there_is_an_example_per_built_in_environment_and_one_with_eval_waves() -> None:
    configs = [parse_run_config_text(path.read_text(), "toml") for path in CONFIGS]
    used = {env.name for config in configs for env in config.envs}
    assert {"arithmetic", "multiturn", "longtail", "targetwords"} <= used
    assert any(config.eval_envs for config in configs)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_each_shipped_config_passes_the_schema(path: Path) -> None:
    config = parse_run_config_text(path.read_text(), "toml")
    assert config.engines and config.train_envs
