"""Requests: validation, token ids across prompt and output, finished states."""

from __future__ import annotations

import numpy as np
import pytest

from inference.sim import text
from inference.sim.request import FinishReason, Request, RequestStatus
from tests.unit.sim.helpers import make_request


def test_token_ids_run_from_the_prompt_into_the_seeded_output() -> None:
    req = make_request("r", num_prompt=5, num_output=10)
    outputs = text.output_token_ids(req.output_seed, 0, 4)
    assert req.token_ids(0, 5).tolist() == [0, 1, 2, 3, 4]
    assert req.token_ids(3, 9).tolist() == [3, 4, *outputs.tolist()]
    assert req.token_ids(6, 9).tolist() == outputs[1:4].tolist()


def test_finish_reasons_map_to_finished_statuses() -> None:
    assert {reason.status for reason in FinishReason} == {
        RequestStatus.FINISHED_STOPPED,
        RequestStatus.FINISHED_LENGTH,
        RequestStatus.FINISHED_ABORTED,
    }
    assert all(reason.status.is_finished for reason in FinishReason)
    assert not RequestStatus.PREEMPTED.is_finished


def test_empty_prompts_and_empty_outputs_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one token"):
        Request("a", np.array([], dtype=np.int64), 1, FinishReason.LENGTH, 0, 0.0, 1)
    with pytest.raises(ValueError, match="generate at least one"):
        Request("b", np.arange(3), 0, FinishReason.LENGTH, 0, 0.0, 0)
