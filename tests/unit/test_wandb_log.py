"""WandbLog against a stand-in ``wandb`` module: each run asks for a W&B run of its own, and a
W&B failure is logged, turns W&B off for that run and never reaches the run."""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from workers.core.config.run import WandbSettings
from workers.core.orchestrator.batches import EvalReport, StepReport
from workers.runtime.wandb_log import WandbLog

OFFLINE = WandbSettings(project="pacer", mode="offline")


class FakeRun:
    def __init__(self, fail_at: int | None = None) -> None:
        self.logged: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.finished = False
        self._fail_at = fail_at

    def log(self, figures: dict[str, Any], **kwargs: Any) -> None:
        if self._fail_at is not None and len(self.logged) >= self._fail_at:
            raise RuntimeError("Run (abc) is finished. The call to `log` will be ignored.")
        self.logged.append((figures, kwargs))

    def finish(self) -> None:
        self.finished = True


def fake_wandb(monkeypatch: pytest.MonkeyPatch, init: Any) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def recorded_init(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return init(**kwargs)

    module = types.SimpleNamespace(init=recorded_init, Settings=lambda **kwargs: kwargs)
    monkeypatch.setitem(sys.modules, "wandb", module)
    return calls


def report(step: int) -> StepReport:
    fields = {name: 0 for name in StepReport.__dataclass_fields__}
    return StepReport(**{**fields, "step": step, "path": "", "reward_mean": 0.5})  # type: ignore[arg-type]


def test_each_run_asks_for_a_wandb_run_of_its_own_in_its_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runs = [FakeRun(), FakeRun()]
    calls = fake_wandb(monkeypatch, lambda **kwargs: runs[len(calls) - 1])
    first = WandbLog(OFFLINE, name="a-1", folder=tmp_path / "1", config={})
    second = WandbLog(OFFLINE, name="b-2", folder=tmp_path / "2", config={})
    first.step(report(1))
    second.step(report(1))
    second.close()
    first.step(report(2))
    assert [call["reinit"] for call in calls] == ["create_new", "create_new"]
    assert [call["dir"] for call in calls] == [str(tmp_path / "1"), str(tmp_path / "2")]
    assert [kwargs["step"] for _, kwargs in runs[0].logged] == [1, 2]
    assert runs[1].finished and not runs[0].finished


def test_a_wandb_failure_is_logged_and_turns_wandb_off_for_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = FakeRun(fail_at=1)
    fake_wandb(monkeypatch, lambda **kwargs: run)
    log = WandbLog(OFFLINE, name="a-1", folder=tmp_path, config={})
    with caplog.at_level(logging.ERROR, logger="workers.runtime.wandb_log"):
        log.step(report(1))
        log.step(report(2))  # raises inside W&B: logged, not raised
        log.step(report(3))
        log.eval(EvalReport(1, 0, 0, 0.0, 1.0, {}, {}, {"math": 0.5}))
        log.close()
    assert len(run.logged) == 1 and not run.finished  # off after the failure
    [record] = caplog.records
    assert "log step 2 failed; W&B is off for this run, which goes on" in record.getMessage()
    assert record.exc_info is not None


def test_a_wandb_run_that_cannot_start_leaves_the_run_without_wandb(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(**kwargs: Any) -> Any:
        raise OSError("wandb-core did not start")

    fake_wandb(monkeypatch, refuse)
    with caplog.at_level(logging.ERROR, logger="workers.runtime.wandb_log"):
        log = WandbLog(OFFLINE, name="a-1", folder=tmp_path, config={})
    log.step(report(1))
    log.close()
    assert "could not start" in caplog.records[0].getMessage()
