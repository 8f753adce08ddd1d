"""Presets are valid engines and unknown names are refused with the known ones."""

from __future__ import annotations

import pytest

from inference.sim.config import EngineConfig
from inference.sim.presets import PRESETS, get_preset


def test_every_preset_makes_a_valid_engine_config() -> None:
    for preset in PRESETS.values():
        config = EngineConfig.from_kv_tokens(
            preset.kv_tokens, preset.block_size, max_model_len=preset.max_model_len
        )
        assert config.kv_capacity_tokens >= preset.max_model_len
        assert preset.cost.step_time(1, 1, 1) > 0


def test_a_gpu_class_preset_decodes_thousands_of_tokens_a_second() -> None:
    cost = get_preset("h100-8b").cost
    step = cost.step_time(256, 256, 256 * 2048)
    assert 2000 < 256 / step < 20_000


def test_unknown_presets_are_refused() -> None:
    with pytest.raises(ValueError, match="known: cpu-tiny, h100-8b"):
        get_preset("tpu")
