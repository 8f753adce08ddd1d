"""The built-in environments and the session they talk through, on an engine of words."""

from __future__ import annotations

import random
import statistics

import pytest

from tests.unit.orchestrator.fakes import BOS, WordEngine, word_id
from workers.core.clock import ManualClock, MonotonicClock
from workers.core.config.fields import ConfigError, Errors, Table
from workers.core.environments.arithmetic import Arithmetic, parse_answer
from workers.core.environments.base import EpisodeError, Sampling, Session
from workers.core.environments.multiturn import MultiTurn, length_score
from workers.core.environments.registry import make_environment
from workers.core.environments.shapes import Distribution, read_distribution
from workers.core.environments.targetwords import TargetWords


def session(engine: WordEngine, seed: int = 7, **kwargs: object) -> Session:
    return Session(engine, Sampling(max_tokens=16), seed=seed, clock=MonotonicClock(), **kwargs)  # type: ignore[arg-type]


def build(name: str, args: dict[str, object]):
    errors = Errors()
    made = make_environment(name, Table(args, "args", errors), "name")
    errors.raise_if_any()
    return made


# -- arithmetic --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"), [(" 85", 85), (" It is -12.", -12), (" 7 or 8", 7), (" none", None)]
)
def test_the_first_integer_of_a_reply_is_its_answer(text: str, value: int | None) -> None:
    assert parse_answer(text) == value


async def test_arithmetic_rewards_the_right_answer_and_only_it() -> None:
    env = Arithmetic(digits=2)
    question, expected = env.task(3)
    right = await env.run(session(WordEngine(answer=lambda t: f"{expected}")), 3)
    wrong = await env.run(session(WordEngine(answer=lambda t: f"{expected + 1}")), 3)
    assert (right.reward, wrong.reward) == (1.0, 0.0)
    assert right.metadata["question"] == question
    assert eval(question) == expected  # the task's own arithmetic, checked independently


# -- target words ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reward"),
    [(" ba ko mi", 1.0), (" ba zu", 0.5), (" bake kobo", 0.0), (" Ba, KO!", 1.0), ("", 0.0)],
)
def test_target_words_reward_the_share_of_whole_words_that_are_targets(
    text: str, reward: float
) -> None:
    assert TargetWords(frozenset({"ba", "ko", "mi"})).score(text) == reward


async def test_a_target_words_episode_is_scored_from_the_text_the_engine_sampled() -> None:
    env = build("targetwords", {"targets": "ba zu"})
    assert isinstance(env, TargetWords) and env.targets == {"ba", "zu"}
    hit = await env.run(session(WordEngine(answer=lambda t: "zu ba lo lo")), 5)
    miss = await env.run(session(WordEngine(answer=lambda t: "lo lo")), 5)
    assert (hit.reward, miss.reward) == (0.5, 0.0)
    assert hit.metadata["answer"].split() == ["zu", "ba", "lo", "lo"]


@pytest.mark.parametrize("targets", ["", "Ba ko", "ba, ko", 7])
def test_target_words_refuse_targets_that_are_not_lower_case_words(targets: object) -> None:
    with pytest.raises(ConfigError, match=r"args\.targets"):
        build("targetwords", {"targets": targets})


# -- the session -------------------------------------------------------------------------------


async def test_a_multi_turn_context_grows_in_place_with_the_mask_over_sampled_tokens() -> None:
    engine = WordEngine(words=3)
    env = MultiTurn(turns=3, prompt_tokens=Distribution("fixed", 10.0))
    episode = await env.run(session(engine), 11)
    first, second, third = engine.turns
    assert first.prompt[0] == BOS and len(first.prompt) == 10
    assert second.prompt[: len(first.prompt) + 3] == (*first.prompt, *episode.token_ids[10:13])
    assert third.prompt[: len(second.prompt)] == second.prompt  # never re-tokenized
    assert len(episode.token_ids) == len(episode.loss_mask) == len(episode.logprobs)
    assert episode.tokens == 9 and episode.turns == 3
    sampled = [lp for lp, m in zip(episode.logprobs, episode.loss_mask, strict=True) if m]
    assert sampled == [-0.5] * 9
    assert all(
        lp == 0.0 for lp, m in zip(episode.logprobs, episode.loss_mask, strict=True) if not m
    )
    assert episode.token_ids[10:13] == tuple(word_id(w) for w in ("w0", "w1", "w2"))


async def test_each_turn_has_its_own_seed_and_asks_for_token_ids_and_logprobs() -> None:
    engine = WordEngine()
    await MultiTurn(turns=2).run(session(engine, seed=5), 1)
    seeds = [turn.seed for turn in engine.turns]
    assert len(set(seeds)) == 2
    assert all(t.return_token_ids and t.logprobs == 0 for t in engine.turns)


async def test_a_failed_turn_fails_the_episode_with_the_engines_reason() -> None:
    engine = WordEngine(fail=lambda turn: True)
    with pytest.raises(EpisodeError, match="turn 1 failed: HTTP 500"):
        await Arithmetic().run(session(engine), 1)


async def test_a_turn_never_asks_past_the_models_length_and_a_full_context_ends_the_episode() -> (
    None
):
    engine = WordEngine(words=50)
    env = MultiTurn(turns=5, prompt_tokens=Distribution("fixed", 20.0))
    episode = await env.run(session(engine, max_model_len=40), 2)
    assert engine.turns[0].max_tokens == 16
    assert len(episode.token_ids) <= 40
    assert episode.turns < 5


async def test_environment_latency_is_spent_on_the_runs_clock() -> None:
    clock = ManualClock()
    engine = WordEngine()
    env = MultiTurn(turns=2, latency_s=Distribution("fixed", 30.0))
    talk = Session(engine, Sampling(), seed=1, clock=clock)
    task = __import__("asyncio").ensure_future(env.run(talk, 1))
    for _ in range(20):
        await __import__("asyncio").sleep(0)
    assert len(engine.turns) == 1  # waiting for the tool
    clock.advance(30.0)
    episode = await task
    assert episode.turns == 2


# -- multiturn's reward, longtail's lengths ----------------------------------------------------


@pytest.mark.parametrize(("words", "score"), [(24, 1.0), (12, 0.5), (36, 0.5), (0, 0.0), (60, 0.0)])
def test_the_length_score_falls_linearly_from_the_asked_length(words: int, score: float) -> None:
    assert length_score(" ".join(["x"] * words), 24) == pytest.approx(score)


async def test_multiturn_rewards_spread_across_a_groups_rollouts() -> None:
    env = MultiTurn(turns=2, words=10)
    rewards = []
    for seed in range(8):
        lengths = random.Random(seed)
        engine = WordEngine(answer=lambda turn, r=lengths: " ".join(["a"] * r.randint(1, 20)))
        rewards.append((await env.run(session(engine, seed=seed), 4)).reward)
    assert len(set(rewards)) > 1 and all(0.0 <= r <= 1.0 for r in rewards)


async def test_longtail_answers_follow_the_configured_heavy_tail() -> None:
    env = build("longtail", {"completion_tokens": {"kind": "pareto", "mean": 200, "alpha": 1.5}})
    lengths = []
    for seed in range(1500):
        episode = await env.run(session(WordEngine(), seed=seed), seed)
        assert episode.reward == 1.0  # the shape was honoured
        lengths.append(episode.tokens)
    median = statistics.median(lengths)
    p99 = sorted(lengths)[int(0.99 * len(lengths))]
    assert 150 < statistics.mean(lengths) < 260  # Pareto's sample mean converges slowly
    assert median < 0.8 * statistics.mean(lengths)  # most answers are short...
    assert p99 > 8 * median  # ...and a few are many times the median


def test_distributions_read_from_config_and_refuse_bad_shapes() -> None:
    errors = Errors()
    table = Table(
        {"a": 5, "b": {"kind": "uniform", "low": 4, "high": 2}, "c": {"kind": "pareto"}},
        "args",
        errors,
    )
    assert read_distribution(table, "a", None) == Distribution("fixed", 5.0)
    assert read_distribution(table, "b", None) is None
    assert read_distribution(table, "c", None) is None
    assert read_distribution(table, "d", 3.0) == Distribution("fixed", 3.0)
    with pytest.raises(ConfigError) as refused:
        errors.raise_if_any()
    assert refused.value.by_field() == {
        "args.b.high": ["must be >= low (4), got 2"],
        "args.c.mean": ["is required"],
    }
