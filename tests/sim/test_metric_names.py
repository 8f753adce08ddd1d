"""The simulator's /metrics matches a recorded real vLLM exposition where Pacer reads it.

For every family Pacer reads (inference.metrics.names, newest spelling), the simulator must
expose the same family type, the same sample names (``_total``, ``_bucket``, ``_created``...)
with the same label names, the same label values where they are an enumeration (waiting
reasons, histogram bounds), and nothing vLLM would not expose.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from inference.metrics.names import NAMES
from inference.sim.config import EngineConfig
from inference.sim.engine import Engine
from inference.sim.metrics import exposition, make_registry
from inference.sim.presets import get_preset
from inference.sim.sampling import SamplingParams

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "metrics"
RECORDED = FIXTURES / "vllm-0.32.0-cpu-idle.txt"
READ_BY_PACER = {names[0] for names in NAMES.values()}
ENUMERATED_LABELS = ("reason", "le", "finished_reason")

Shape = dict[str, tuple[str, dict[str, frozenset[str]], dict[str, frozenset[str]]]]


def shape(text: str) -> Shape:
    """Per family: its type, label names per sample name, enumerated label values."""
    result: Shape = {}
    for family in text_string_to_metric_families(text):
        labels: dict[str, set[str]] = defaultdict(set)
        values: dict[str, set[str]] = defaultdict(set)
        for sample in family.samples:
            labels[sample.name] |= set(sample.labels)
            for name in ENUMERATED_LABELS:
                if name in sample.labels:
                    values[name].add(sample.labels[name])
        result[family.name] = (
            family.type,
            {name: frozenset(names) for name, names in labels.items()},
            {name: frozenset(found) for name, found in values.items()},
        )
    return result


def simulator_text() -> str:
    """A simulator that has served a request, so that every series has samples."""
    preset = get_preset("cpu-tiny")
    config = EngineConfig(
        model_name="pacer-tiny", block_size=128, num_gpu_blocks=16, max_model_len=1024
    )
    engine = Engine(config, preset.cost)
    engine.add_request("r", np.arange(3, 200), SamplingParams(max_tokens=4), 0.0)
    now = 0.0
    while engine.has_unfinished_requests():
        now = engine.step(now).end
    return exposition(make_registry(engine, created=1.0)).decode()


def pacer_families(families: Shape) -> Shape:
    """The families Pacer reads, with the ``_created`` gauges prometheus_client adds."""
    wanted = READ_BY_PACER | {f"{name}_created" for name in READ_BY_PACER}
    return {name: value for name, value in families.items() if name in wanted}


def test_the_families_pacer_reads_match_the_real_engine_exactly() -> None:
    real = pacer_families(shape(RECORDED.read_text()))
    simulated = pacer_families(shape(simulator_text()))
    assert set(real) == set(simulated)
    assert {name for name in READ_BY_PACER} <= set(real)  # the recording has them all
    for name in sorted(real):
        assert simulated[name] == real[name], name


def test_the_simulator_exposes_no_vllm_family_the_real_engine_lacks() -> None:
    real = shape(RECORDED.read_text())
    simulated = shape(simulator_text())
    assert {name for name in simulated if name.startswith("vllm:")} <= set(real)
    for name, (kind, labels, values) in simulated.items():
        assert (kind, labels, values) == real[name], name
