"""The launcher's decisions, without starting vLLM (the engine tests start it for real)."""

import sys
import types
from pathlib import Path

import pytest

from inference import serve
from inference.vllm_plugin import detokenizer


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


def test_command_carries_pacer_and_cpu_flags_then_passthrough(model_dir: Path) -> None:
    args, passthrough = serve.parse_args(
        ["--model", str(model_dir), "--cpu", "--port", "9001", "--num-gpu-blocks-override", "16"]
    )
    command = serve.build_command(args, passthrough, "/venv/bin/python")
    assert command[:3] == ["/venv/bin/python", "-m", serve.VLLM_SERVER_MODULE]
    assert command[command.index("--port") + 1] == "9001"
    assert command[command.index("--max-num-seqs") + 1] == str(serve.DEFAULT_MAX_NUM_SEQS)
    assert command[command.index("--distributed-executor-backend") + 1] == "uni"
    assert {"--enable-prefix-caching", "--enforce-eager"} <= set(command)
    assert command[-2:] == ["--num-gpu-blocks-override", "16"]


def test_without_cpu_no_cpu_flags_or_env(model_dir: Path) -> None:
    args, passthrough = serve.parse_args(["--model", str(model_dir)])
    assert "--enforce-eager" not in serve.build_command(args, passthrough, "python")
    assert serve.build_env(args, {"PATH": "/bin"}) == {"PATH": "/bin"}


def test_cpu_env_defaults_yield_to_the_callers(model_dir: Path) -> None:
    args, _ = serve.parse_args(["--model", str(model_dir), "--cpu"])
    env = serve.build_env(args, {"VLLM_CPU_KVCACHE_SPACE": "4"})
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert env["HF_HUB_OFFLINE"] == "1"


@pytest.mark.parametrize(
    ("env", "registered", "expected"),
    [
        ({"VLLM_PLUGINS": ""}, True, "leaves out 'pacer'"),
        ({"VLLM_PLUGINS": "other,pacer"}, True, None),
        ({}, True, None),
        ({}, False, "not registered"),
    ],
)
def test_plugin_problems(env: dict[str, str], registered: bool, expected: str | None) -> None:
    problems = serve.plugin_problems(env, registered)
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1
        assert expected in problems[0]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--max-num-seqs", "128", "--expected-cap", "512"], ["below the expected cap"]),
        (["--max-num-seqs", "512", "--expected-cap", "512"], []),
    ],
)
def test_capacity_warnings(model_dir: Path, flags: list[str], expected: list[str]) -> None:
    args, _ = serve.parse_args(["--model", str(model_dir), *flags])
    problems = serve.capacity_warnings(args)
    assert len(problems) == len(expected)
    for problem, phrase in zip(problems, expected, strict=True):
        assert phrase in problem


def test_refuses_to_start_unpatched_unless_forced(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VLLM_PLUGINS", "")
    executed: list[list[str]] = []
    monkeypatch.setattr(serve.os, "execve", lambda path, argv, env: executed.append(argv))

    with pytest.raises(SystemExit, match="refusing to start"):
        serve.main(["--model", str(model_dir)])
    assert executed == []

    serve.main(["--model", str(model_dir), "--allow-unpatched"])
    assert len(executed) == 1
    assert "vLLM would run unpatched" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "/nonexistent"], "not a model directory"),
        (["--max-num-seqs", "0"], "at least 1"),
        (["--disable-log-stats"], "turns off the metrics"),
        (["--disable_log_stats"], "turns off the metrics"),  # vLLM takes either spelling
        (["--disable-log-stats=true"], "turns off the metrics"),
    ],
)
def test_bad_input_is_refused_clearly(
    model_dir: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    full = argv if argv[0] == "--model" else ["--model", str(model_dir), *argv]
    with pytest.raises(SystemExit):
        serve.parse_args(full)
    assert message in capsys.readouterr().err


def test_a_vllm_without_the_patch_target_is_a_reason_to_refuse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with_target = types.ModuleType("fake_vllm_detokenizer_utils")
    setattr(with_target, detokenizer.TARGET, lambda raw, token, marker: token)
    monkeypatch.setitem(sys.modules, with_target.__name__, with_target)
    monkeypatch.setitem(sys.modules, "fake_vllm_other", types.ModuleType("fake_vllm_other"))

    assert serve.patch_target_problems(("fake_vllm_missing", with_target.__name__)) == []
    (moved,) = serve.patch_target_problems(("fake_vllm_missing", "fake_vllm_other"))
    assert "would run unpatched" in moved


def test_weight_updates_turn_on_vllms_dev_routes_over_the_callers_env(model_dir: Path) -> None:
    args, _ = serve.parse_args(["--model", str(model_dir), "--weight-updates"])
    assert serve.build_env(args, {"VLLM_SERVER_DEV_MODE": "0"})["VLLM_SERVER_DEV_MODE"] == "1"
    plain, _ = serve.parse_args(["--model", str(model_dir)])
    assert "VLLM_SERVER_DEV_MODE" not in serve.build_env(plain, {})
    assert serve.exposure_warnings(args) == []  # loopback by default


def test_weight_updates_on_every_interface_are_refused_unless_asked_for(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        serve.parse_args(["--model", str(model_dir), "--weight-updates", "--host", "0.0.0.0"])
    assert "swap the engine's weights" in capsys.readouterr().err
    args, _ = serve.parse_args(
        [
            *("--model", str(model_dir), "--weight-updates", "--host", "0.0.0.0"),
            "--weight-updates-on-every-interface",
        ]
    )
    assert "only the control plane's workers" in serve.exposure_warnings(args)[0]
    private, _ = serve.parse_args(
        ["--model", str(model_dir), "--weight-updates", "--host", "10.0.0.5"]
    )
    assert serve.exposure_warnings(private)
