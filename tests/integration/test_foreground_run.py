"""``python -m workers.run`` as a user runs it: a real process, two simulated engines over
HTTP, and what it leaves on disk; and the configs it refuses before starting anything."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT, free_port
from tests.integration.hosting import SimEngine, sim_engines

pytestmark = pytest.mark.integration

MULTITURN = """
name = "foreground"
batch_size = 16
group_size = 4
max_steps = 5
[concurrency]
max_inflight = 48
poll_interval_s = 0.5
[[env]]
name = "multiturn"
args = {{ turns = 3, prompt_tokens = 64, observation_tokens = 32 }}
[env.sampling]
max_tokens = 24
[[engine]]
url = "{0}"
[[engine]]
url = "{1}"
"""


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SimEngine]]:
    with sim_engines(tmp_path_factory.mktemp("sims"), 2) as started:
        yield started


def run(config: Path, output: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workers.run", str(config), "--output", str(output)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def test_a_five_step_multiturn_run_writes_five_whole_batches(
    engines: list[SimEngine], tmp_path: Path
) -> None:
    config = tmp_path / "multiturn.toml"
    config.write_text(MULTITURN.format(*(e.url for e in engines)))
    output = tmp_path / "out"
    done = run(config, output)
    assert done.returncode == 0, done.stdout + done.stderr
    progress = [line for line in done.stdout.splitlines() if "step " in line and "/5:" in line]
    assert len(progress) == 5
    assert done.stdout.strip().splitlines()[-1].startswith("completed: 5 steps written")

    steps = sorted((output / "steps").iterdir())
    assert [p.name for p in steps] == [f"{n:06d}" for n in range(1, 6)]
    for step, folder in enumerate(steps, start=1):
        batch = torch.load(folder / "batch.pt")
        samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
        assert batch["step"] == step and len(samples) == 16
        ids, mask, logprobs = batch["token_ids"], batch["loss_mask"], batch["logprobs"]
        assert ids.shape == mask.shape == logprobs.shape and ids.shape[0] == 16
        for row, length in enumerate(batch["lengths"].tolist()):
            assert not mask[row, length:].any() and mask[row, :length].any()
            assert (logprobs[row][~mask[row]] == 0).all() and (logprobs[row][mask[row]] < 0).all()
            assert samples[row]["length"] == length
            assert int(mask[row].sum()) == samples[row]["generated_tokens"]
        groups = defaultdict(list)
        for row, sample in enumerate(samples):
            groups[sample["group_id"]].append(float(batch["advantages"][row]))
            assert batch["policy_version"][row] == sample["policy_version"] < step
        for advantages in groups.values():
            assert len(advantages) == 4
            assert sum(advantages) == pytest.approx(0.0, abs=1e-5)
            spread = torch.tensor(advantages).std(unbiased=False)
            assert float(spread) == pytest.approx(1.0, abs=1e-4) or float(spread) == 0.0
    decisions = [json.loads(line) for line in (output / "decisions.jsonl").read_text().splitlines()]
    assert decisions[0]["kind"] == "bootstrap"
    assert max(d["cap_after"] for d in decisions) <= 48
    assert list((output / "wandb").glob("offline-run-*/run-*.wandb"))


def test_the_shipped_multiturn_config_scores_answers_apart_on_the_quick_starts_engines(
    tmp_path: Path,
) -> None:
    """On engines that run every answer to max_tokens, every answer scored the same (0) and
    every advantage was 0: the demo's reward chart was a flat line and its batches taught
    nothing. scripts/run's engines end answers themselves; read how from the script."""
    lengths = re.search(
        r"^SIM_ANSWER_LENGTHS=(\S+)$", (REPO_ROOT / "scripts/run").read_text(), re.M
    )
    assert lengths, "scripts/run no longer sets SIM_ANSWER_LENGTHS"
    with sim_engines(tmp_path, 2, "--length", lengths.group(1)) as started:
        text = (REPO_ROOT / "configs" / "multiturn.toml").read_text()
        for port, engine in zip(("8100", "8101"), started, strict=True):
            text = text.replace(f"http://127.0.0.1:{port}", engine.url)
        config = tmp_path / "multiturn.toml"
        config.write_text(text.replace("max_steps = 5", "max_steps = 2"))
        done = run(config, tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    for step in ("000001", "000002"):
        report = json.loads((tmp_path / "out" / "steps" / step / "report.json").read_text())
        assert 0.3 < report["reward_mean"] < 0.95 and report["reward_std"] > 0.02, report
        advantages = torch.load(tmp_path / "out" / "steps" / step / "batch.pt")["advantages"]
        assert (advantages != 0).float().mean() > 0.5


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda t: t.replace("batch_size = 16", 'batch_size = "16"'), "batch_size"),
        (
            lambda t: t.replace("max_inflight = 48", "max_inflight = 48\nmin_inflight = 64"),
            "concurrency.max_inflight",
        ),
        (lambda t: t.replace('name = "multiturn"', 'name = "chess"'), "env[0].name"),
        (lambda t: t.replace("group_size = 4", "group_size = 4\ncolour = 1"), "colour"),
        (lambda t: 'model = "gpt-9"\n' + t, "model"),
    ],
    ids=["wrong-type", "min-above-max", "unknown-env", "unknown-key", "model-not-served"],
)
def test_a_bad_config_is_refused_naming_the_field_and_nothing_is_written(
    engines: list[SimEngine], tmp_path: Path, change: object, field: str
) -> None:
    text = change(MULTITURN.format(*(e.url for e in engines)))  # type: ignore[operator]
    config = tmp_path / "bad.toml"
    config.write_text(text)
    done = run(config, tmp_path / "out")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"  {field}: " in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_an_engine_that_does_not_answer_is_refused_before_anything_starts(
    engines: list[SimEngine], tmp_path: Path
) -> None:
    config = tmp_path / "dead.toml"
    config.write_text(MULTITURN.format(engines[0].url, f"http://127.0.0.1:{free_port()}"))
    done = run(config, tmp_path / "out")
    assert done.returncode == 2
    assert "engine[1].url: " in done.stderr and "no model list" in done.stderr  # and why
    assert not (tmp_path / "out").exists()


ECHO_PACKAGE = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=69"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "pacer-echo-env"
        version = "0.1"
        [project.entry-points."pacer.environments"]
        echo = "pacer_echo_env:Echo"
    """,
    "pacer_echo_env.py": '''
        class Echo:
            """Asks for the task seed back; a reward for saying any number at all."""

            name = "echo"

            @classmethod
            def from_args(cls, args):
                args.finish()
                return cls()

            async def run(self, session, task_seed):
                await session.prompt(f"Say {task_seed}.")
                answer = await session.generate()
                return session.finish(reward=float(any(c.isdigit() for c in answer.text)))
    ''',
}


def test_an_environment_from_an_installed_package_is_found_by_its_entry_point(
    engines: list[SimEngine], tmp_path: Path
) -> None:
    source, target = tmp_path / "echo-src", tmp_path / "site"
    source.mkdir()
    for name, text in ECHO_PACKAGE.items():
        (source / name).write_text(textwrap.dedent(text))
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr
    config = tmp_path / "echo.toml"
    text = MULTITURN.format(*(e.url for e in engines)).replace("max_steps = 5", "max_steps = 1")
    config.write_text(
        text.replace('name = "multiturn"', 'name = "echo"').replace(
            "args = { turns = 3, prompt_tokens = 64, observation_tokens = 32 }", ""
        )
    )
    done = run(config, tmp_path / "out", PYTHONPATH=str(target))
    assert done.returncode == 0, done.stdout + done.stderr
    samples = (tmp_path / "out" / "steps" / "000001" / "samples.jsonl").read_text().splitlines()
    assert {json.loads(line)["env"] for line in samples} == {"echo"}
