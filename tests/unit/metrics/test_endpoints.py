"""Engine configuration is validated where it is built."""

from __future__ import annotations

import pytest

from inference.metrics.endpoints import EngineSpec
from workers.core.samples import EngineRole, endpoint_of


def test_a_valid_spec_keeps_its_role() -> None:
    spec = EngineSpec("d0", "http://engine:8000", EngineRole.DECODE, max_num_seqs=256)
    assert spec.role is EngineRole.DECODE


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "a/b", "base_url": "http://e:1"}, "without '/'"),
        ({"name": "", "base_url": "http://e:1"}, "non-empty"),
        ({"name": "a", "base_url": "engine:8000"}, "http"),
        ({"name": "a", "base_url": "http://e:1", "max_num_seqs": 0}, ">= 1"),
    ],
)
def test_an_invalid_spec_is_refused_with_the_reason(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineSpec(**kwargs)


def test_a_data_parallel_rank_belongs_to_its_endpoint() -> None:
    assert endpoint_of("dp/3") == "dp"
    assert endpoint_of("single") == "single"
