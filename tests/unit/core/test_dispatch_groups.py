"""Which group the dispatcher serves next, and which it sheds first."""

from __future__ import annotations

from workers.core.dispatch.episodes import EpisodeTicket, GroupSpec
from workers.core.dispatch.groups import Group, GroupQueue, LiveEpisode
from workers.core.dispatch.permits import EpisodeKind, PermitLedger

LEDGER = PermitLedger()


def spec(group_id: str, size: int = 2, kind: EpisodeKind = EpisodeKind.TRAIN) -> GroupSpec[int]:
    return GroupSpec(group_id, kind, "math", 0, tuple(range(size)))


def next_id(queue: GroupQueue) -> str | None:
    group = queue.next()
    return None if group is None else group.spec.group_id


def start(queue: GroupQueue, count: int, at: float) -> None:
    """Admit ``count`` episodes of the next group, each live from ``at``."""
    group = queue.next()
    assert group is not None
    for index in queue.admit(group, count):
        live(group, index, at)


def live(group: Group, index: int, at: float) -> None:
    """Episode ``index`` of ``group`` (already admitted) is live from ``at``."""
    ticket = EpisodeTicket(group.spec.group_id, index, group.spec.kind, "math", 0, index)
    group.live[index] = LiveEpisode(ticket, LEDGER.issue(group.spec.kind, "a", at), at)


def test_a_started_group_is_served_before_new_ones_then_fifo() -> None:
    queue = GroupQueue()
    for name in ("a", "b", "c"):
        queue.add(spec(name, size=3))
    start(queue, 2, at=0.0)
    assert [next_id(queue) for _ in range(2)] == ["a", "a"]  # asking does not advance
    start(queue, 1, at=1.0)  # a is fully admitted now
    assert next_id(queue) == "b"
    assert (queue.pending_episodes, len(queue)) == (6, 3)


def test_a_closed_group_is_skipped_and_forgotten_once_its_episodes_end() -> None:
    queue = GroupQueue()
    queue.add(spec("a"))
    queue.add(spec("b"))
    start(queue, 1, at=0.0)
    (a, b) = queue.groups()
    queue.close(a)
    assert ("a" in queue, queue.next()) == (True, b)  # a still has a live episode
    queue.ended(a, 0)
    assert ("a" in queue, a.remaining) == (False, 0)
    queue.close(b)
    assert (len(queue), queue.next()) == (0, None)


def test_new_eval_groups_are_served_before_new_train_groups() -> None:
    queue = GroupQueue()
    queue.add(spec("t0", size=2))
    queue.add(spec("t1"))
    start(queue, 1, at=0.0)  # t0 is started
    queue.add(spec("e0", kind=EpisodeKind.EVAL))
    assert next_id(queue) == "t0"  # a started group still comes first
    start(queue, 1, at=1.0)
    assert next_id(queue) == "e0"
    start(queue, 2, at=2.0)
    assert next_id(queue) == "t1"


def test_pending_episodes_count_what_is_queued_through_admissions_and_closes() -> None:
    queue = GroupQueue()
    for name in ("a", "b", "c"):
        queue.add(spec(name, size=4))
    start(queue, 3, at=0.0)
    a, b, _ = queue.groups()
    assert queue.pending_episodes == 9
    queue.close(a)  # its fourth episode is never admitted
    queue.close(b)
    queue.close(b)  # closing twice takes nothing more
    assert queue.pending_episodes == 4
    assert queue.pending_episodes == sum(g.remaining for g in queue.groups())


def test_victims_are_open_train_groups_with_live_episodes_youngest_first() -> None:
    queue = GroupQueue()
    queue.add(spec("old", size=1))
    queue.add(spec("eval", size=1, kind=EpisodeKind.EVAL))
    queue.add(spec("young", size=1))
    queue.add(spec("queued", size=1))
    for at in (0.0, 1.0, 2.0):
        start(queue, 1, at=at)
    assert [g.spec.group_id for g in queue.victims()] == ["young", "old"]


def test_open_where_selects_by_spec() -> None:
    queue = GroupQueue()
    queue.add(spec("a"))
    queue.add(spec("b", kind=EpisodeKind.EVAL))
    evals = queue.open_where(lambda s: s.kind is EpisodeKind.EVAL)
    assert [g.spec.group_id for g in evals] == ["b"]


def test_a_groups_age_is_its_oldest_live_members_start_not_its_newest() -> None:
    """a's members live from t=0 and t=2, b's from t=1: a is the older group while a/0
    lives, so b is shed first; once a/0 has ended, a's age is t=2 and a goes first."""
    queue = GroupQueue()
    queue.add(spec("a"))
    queue.add(spec("b", size=1))
    a, b = queue.groups()
    queue.admit(a, 2)
    queue.admit(b, 1)
    live(a, 0, at=0.0)
    live(b, 0, at=1.0)
    live(a, 1, at=2.0)
    assert [g.spec.group_id for g in queue.victims()] == ["b", "a"]
    del a.live[0]
    assert [g.spec.group_id for g in queue.victims()] == ["a", "b"]
