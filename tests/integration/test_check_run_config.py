"""``manage.py check_run_config``: the API's own checks on config files, nothing started."""

from __future__ import annotations

import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from controlplane.runs.models import Run
from controlplane.runs.services import engine_register
from tests.conftest import REPO_ROOT, VENV_BIN
from tests.integration.hosting import SimEngine, sim_engines

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SimEngine]]:
    with sim_engines(tmp_path_factory.mktemp("sims"), 2) as started:
        yield started


def check(*args: str) -> tuple[str, CommandError | None]:
    out = io.StringIO()
    try:
        call_command("check_run_config", *args, stdout=out)
    except CommandError as refused:
        return out.getvalue(), refused
    return out.getvalue(), None


def test_the_demo_config_passes_against_its_registered_engines(engines: list[SimEngine]) -> None:
    for index, engine in enumerate(engines):
        engine_register(name=f"sim-engine-{index}", url=engine.url)
    output, refused = check(str(REPO_ROOT / "configs" / "demo.toml"))
    assert refused is None, output
    assert output.strip().endswith("demo.toml: ok")
    assert not Run.objects.exists()  # nothing started


def test_every_shipped_config_passes_the_schema_without_asking_engines() -> None:
    for index in range(2):  # the demo's (sim) and the vLLM demo's (vllm) engines
        engine_register(name=f"sim-engine-{index}", url=f"http://127.0.0.1:{9000 + index}")
        engine_register(name=f"vllm-engine-{index}", url=f"http://127.0.0.1:{9100 + index}")
    files = sorted(str(p) for p in (REPO_ROOT / "configs").glob("*.toml"))
    output, refused = check(*files, "--no-engines")
    assert refused is None, output
    assert output.count(": ok") == len(files)


def in_a_fresh_checkout(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The command as a newcomer runs it before anything else: no database, no var/, the
    settings' defaults (no DATABASE_URL, DEBUG or SECRET_KEY)."""
    unset = ("DATABASE_URL", "DEBUG", "SECRET_KEY")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [str(VENV_BIN / "python"), "manage.py", "check_run_config", *argv],
        cwd=REPO_ROOT,
        env={**env, "PACER_VAR_DIR": str(tmp_path / "var")},
        capture_output=True,
        text=True,
    )


def test_a_fresh_checkout_checks_a_config_with_no_database_and_no_engines(
    tmp_path: Path,
) -> None:
    done = in_a_fresh_checkout(tmp_path, "configs/multiturn.toml", "--no-engines")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "configs/multiturn.toml: ok"
    assert not (tmp_path / "var").exists()  # nothing made


def test_a_config_naming_registered_engines_says_in_one_line_what_to_run_first(
    tmp_path: Path,
) -> None:
    for before in ("no folder", "an empty database"):
        if before == "an empty database":
            (tmp_path / "var").mkdir()
        done = in_a_fresh_checkout(tmp_path, "configs/demo.toml", "--no-engines")
        assert done.returncode != 0
        assert "Traceback" not in done.stderr, done.stderr
        said = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(said) == 1 and "./scripts/run" in said[0] and "migrate" in said[0], said


def test_refused_configs_list_their_field_errors_and_fail_the_command(
    engines: list[SimEngine], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "x"\nbatch_size = 10\ngroup_size = 4\n[[env]]\nname = "chess"\n'
        '[[engine]]\nname = "nowhere"\n'
    )
    served = tmp_path / "served.toml"
    served.write_text(
        f'name = "y"\nmodel = "gpt-9"\n[[env]]\nname = "arithmetic"\n'
        f'[[engine]]\nurl = "{engines[0].url}"\n'
    )
    output, refused = check(str(bad), str(served))
    assert refused is not None and "2 of 2 configs refused" in str(refused)
    assert "env[0].name: unknown environment 'chess'" in output
    assert "batch_size: must be a multiple of group_size (4), got 10" in output
    assert "model: 'gpt-9' is not served by" in output
