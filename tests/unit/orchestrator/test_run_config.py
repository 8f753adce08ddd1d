"""The run config: one schema for TOML and JSON, every field error at once, at its path."""

from __future__ import annotations

import json

import pytest

from workers.core.config.fields import ConfigError
from workers.core.config.run import parse_run_config, parse_run_config_text
from workers.core.controller.observe import ObserveOnly
from workers.core.controller.policies.pacer import PacerPolicy
from workers.core.dispatch.permits import EpisodeKind
from workers.core.environments.multiturn import MultiTurn
from workers.core.samples import EngineRole

TOML = """
name = "agentic"
batch_size = 16
group_size = 4
max_steps = 3
eval_every = 2

[concurrency]
policy = "pacer"
max_inflight = 256
poll_interval_s = 1.0
drain_stuck_polls = 4
[concurrency.pacer]
target_kv_usage = 0.85
[concurrency.pacing]
window = 2.0

[[env]]
name = "multiturn"
args = { turns = 3, observation_tokens = { kind = "lognormal", mean = 40, sigma = 0.3 } }
[env.sampling]
max_tokens = 64

[[env]]
name = "arithmetic"
kind = "eval"
episodes = 8

[[engine]]
url = "http://127.0.0.1:8100"
[[engine]]
url = "http://127.0.0.1:8101"
role = "decode"
max_num_seqs = 128
"""


def errors_of(document: object) -> dict[str, list[str]]:
    with pytest.raises(ConfigError) as refused:
        parse_run_config(document)
    return refused.value.by_field()


def minimal(**top: object) -> dict[str, object]:
    document: dict[str, object] = {
        "name": "r",
        "env": [{"name": "arithmetic"}],
        "engine": [{"url": "http://e:8000"}],
    }
    document.update(top)
    return document


def test_a_toml_config_is_read_into_the_cores_own_settings() -> None:
    config = parse_run_config_text(TOML, "toml")
    assert (config.name, config.model, config.batch_size, config.group_size) == (
        "agentic",
        "auto",
        16,
        4,
    )
    concurrency = config.concurrency
    assert (concurrency.controller.max_inflight, concurrency.controller.drain_stuck_polls) == (
        256,
        4,
    )
    assert concurrency.pacer.target_kv_usage == 0.85
    assert concurrency.pacing.window == 2.0
    assert concurrency.loop.poll_period == 1.0
    assert isinstance(concurrency.make_controller().policy, PacerPolicy)
    train, evaluation = config.envs
    assert isinstance(train.environment, MultiTurn)
    assert train.environment.turns == 3
    assert train.environment.observation_tokens.kind == "lognormal"
    assert train.sampling.max_tokens == 64
    assert (evaluation.kind, evaluation.episodes) == (EpisodeKind.EVAL, 8)
    assert [e.role for e in config.engines] == [EngineRole.UNIFIED, EngineRole.DECODE]
    assert config.engines[1].max_num_seqs == 128
    assert config.trainer.mode == "none" and config.wandb.mode == "offline"


def test_json_reads_the_same_as_toml() -> None:
    from_toml = parse_run_config_text(TOML, "toml")
    from_json = parse_run_config_text(json.dumps(from_toml.document), "json")
    assert from_json.document == from_toml.document
    assert from_json.concurrency == from_toml.concurrency


def test_observe_wraps_the_controller() -> None:
    config = parse_run_config(minimal(concurrency={"observe": True}))
    assert isinstance(config.concurrency.make_controller(), ObserveOnly)


def test_every_error_is_reported_at_once_each_at_its_path() -> None:
    found = errors_of(
        {
            "name": 7,
            "batch_size": "64",
            "group_size": 0,
            "colour": "blue",
            "concurrency": {
                "policy": "magic",
                "min_inflight": 50,
                "max_inflight": 10,
                "pacer": {"trim_kv_usage": 2.0, "bogus": 1},
            },
            "env": [{"name": "arithmetic", "args": {"digits": "two"}}],
            "engine": [{"url": "ftp://x"}],
        }
    )
    assert found["name"] == ["must be a non-empty string, got 7"]
    assert found["batch_size"] == ["must be an integer, got '64'"]
    assert found["group_size"] == ["must be >= 1, got 0"]
    assert found["colour"][0].startswith("unknown key")
    assert "must be one of 'pacer', 'reference', 'fixed'" in found["concurrency.policy"][0]
    assert found["concurrency.max_inflight"] == ["must be in [50, 1000000], got 10"]
    assert found["concurrency.pacer.trim_kv_usage"] == ["must be in [0.88, 1.0], got 2.0"]
    assert found["concurrency.pacer.bogus"][0].startswith("unknown key")
    assert found["env[0].args.digits"] == ["must be an integer, got 'two'"]
    assert found["engine[0].url"] == ["must be an http(s) URL, got 'ftp://x'"]


@pytest.mark.parametrize(
    ("document", "path", "message"),
    [
        (minimal(env=[{"name": "chess"}]), "env[0].name", "unknown environment 'chess'"),
        (minimal(env=[{"name": "arithmetic", "kind": "eval"}]), "env", 'kind = "train"'),
        (minimal(eval_every=5), "eval_every", "no [[env]] has kind"),
        (minimal(batch_size=10, group_size=4), "batch_size", "multiple of group_size (4)"),
        (minimal(engine=[]), "engine", "at least one [[engine]]"),
        (minimal(engine=[{"url": "http://a", "name": "b"}]), "engine[0]", "url, or the name"),
        (minimal(env=[{"name": "multiturn", "args": {"turns": 0}}]), "env[0].args.turns", ">= 1"),
        (
            minimal(env=[{"name": "longtail", "args": {"completion_tokens": {"kind": "zipf"}}}]),
            "env[0].args.completion_tokens.kind",
            "must be one of",
        ),
        (minimal(trainer={"mode": "sometimes"}), "trainer.mode", "must be one of"),
        (minimal(concurrency={"poll_ttl": float("nan")}), "concurrency.poll_ttl", "finite"),
        (minimal(concurrency={"queue_polls": 3}), "concurrency.queue_polls", "unknown key"),
        (
            minimal(concurrency={"pacer": {"trim_polls": 2}}),
            "concurrency.pacer.trim_polls",
            "is retired (merged into confirm_polls)",
        ),
        (
            minimal(concurrency={"pacer": {"hold_turnovers": 2.0, "confirm_polls": 0}}),
            "concurrency.pacer.confirm_polls",
            "must be in [1, 1000]",
        ),
        (
            minimal(env=[{"name": "arithmetic", "sampling": {"top_p": 0}}]),
            "env[0].sampling.top_p",
            "in [",
        ),
        ([1, 2], "config", "must be a table"),
    ],
)
def test_bad_configs_name_the_field(document: object, path: str, message: str) -> None:
    found = errors_of(document)
    assert path in found, found
    assert any(message in text for text in found[path]), found[path]


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        ("name = ", "toml", "the TOML does not parse"),
        ("{", "json", "the JSON does not parse"),
    ],
)
def test_a_document_that_does_not_parse_is_a_config_error(
    text: str, kind: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_run_config_text(text, kind)
