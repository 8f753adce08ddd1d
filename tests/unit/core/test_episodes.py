"""Group specs refuse what the dispatcher could not run."""

from __future__ import annotations

import pytest

from workers.core.dispatch.episodes import GroupSpec
from workers.core.dispatch.permits import EpisodeKind


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"group_id": ""}, "group_id"),
        ({"payloads": ()}, "no episodes"),
        ({"policy_version": -1}, "policy_version"),
    ],
)
def test_impossible_groups_are_refused(fields, message) -> None:
    spec = {
        "group_id": "g",
        "kind": EpisodeKind.TRAIN,
        "env": "math",
        "policy_version": 0,
        "payloads": (1, 2),
    }
    spec.update(fields)
    with pytest.raises(ValueError, match=message):
        GroupSpec(**spec)


def test_size_is_the_number_of_payloads() -> None:
    assert GroupSpec("g", EpisodeKind.EVAL, "math", 3, ("a", "b", "c")).size == 3
