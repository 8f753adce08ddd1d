"""The running batch keeps order and hands counters back to the requests that leave it."""

from __future__ import annotations

import numpy as np
import pytest

from inference.sim.batch import RunningBatch
from tests.unit.sim.helpers import make_request


def test_counters_move_into_the_arrays_and_back_out() -> None:
    batch = RunningBatch(capacity=4)
    reqs = [make_request(name, num_prompt=5, num_output=3) for name in "abcd"]
    for req in reqs:
        req.set_counters(2, 0)
        batch.append(req)
    batch.num_computed[:4] += 3
    assert reqs[2].num_computed_tokens == 5 and reqs[2].batch_pos == 2
    removed = batch.remove(np.array([0, 2]))
    assert removed == [reqs[0], reqs[2]] and removed[0].batch is None
    assert removed[0].num_computed_tokens == 5
    assert batch.reqs == [reqs[1], reqs[3]]
    assert [req.batch_pos for req in batch.reqs] == [0, 1]
    assert reqs[3].num_computed_tokens == 5
    assert batch.pop() is reqs[3] and len(batch) == 1


def test_a_full_batch_refuses_more_and_running_counters_cannot_be_set() -> None:
    batch = RunningBatch(capacity=1)
    req = make_request("a", num_prompt=2, num_output=1)
    batch.append(req)
    with pytest.raises(ValueError, match="full"):
        batch.append(make_request("b", num_prompt=2, num_output=1))
    with pytest.raises(ValueError, match="in the running batch"):
        req.set_counters(0, 0)
