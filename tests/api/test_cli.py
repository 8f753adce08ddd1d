"""The ``pacer`` client against the real ASGI server (daphne in its own process, on the test
database): what it prints, what it sends, and its exit status."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from controlplane.runs.models import Engine, Override, Run, RunState, StepRecord
from pacer_cli.main import main
from tests.api.conftest import (
    LiveServer,
    config_toml,
    make_account,
    make_decisions,
    make_run,
    make_step,
)
from tests.conftest import REPO_ROOT, free_port
from tests.integration.hosting import SimEngine
from tests.model_folders import model_folder

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def pacer(server: LiveServer, token: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--url", server.url, "--token", token, *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_create_from_toml_list_and_show(
    live_server_api: LiveServer, sim_engine: SimEngine, tmp_path: Path
) -> None:
    token = make_account("olga", "operator").token
    config = tmp_path / "run.toml"
    config.write_text(config_toml(sim_engine.url, name="from-the-cli"))
    code, out, err = pacer(live_server_api, token, "runs", "create", str(config))
    assert code == 0, err
    run = Run.objects.get()
    assert out == f"run {run.pk} queued (from-the-cli)\n"
    assert (run.name, run.created_by.username) == ("from-the-cli", "olga")  # type: ignore[union-attr]

    code, out, _ = pacer(live_server_api, token, "runs", "list")
    header, row = out.splitlines()
    assert re.split(r"\s{2,}", header) == [
        "ID", "NAME", "STATE", "STEP", "CAP", "POLICY CAP", "INFLIGHT", "TOK/S", "CREATED"
    ]  # fmt: skip
    assert row.split()[:4] == [str(run.pk), "from-the-cli", "queued", "0"]
    code, out, _ = pacer(live_server_api, token, "runs", "show", str(run.pk))
    assert out.splitlines()[0] == f"run {run.pk}: from-the-cli (queued)"
    assert "created" in out and "by olga" in out


def test_a_reader_that_goes_away_ends_the_client_quietly(live_server_api: LiveServer) -> None:
    token = make_account("olga", "operator").token
    make_run(name="piped")
    client = subprocess.Popen(
        [str(Path(sys.executable).parent / "pacer"), "--url", live_server_api.url, "--token",
         token, "runs", "list"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert client.stdout is not None and client.stderr is not None
    client.stdout.close()  # as `pacer runs list | head -0` does
    err = client.stderr.read().decode()
    assert (client.wait(timeout=30), err) == (141, "")


def test_the_api_field_errors_are_printed_with_exit_1(
    live_server_api: LiveServer, tmp_path: Path
) -> None:
    token = make_account("olga", "operator").token
    config = tmp_path / "bad.toml"
    config.write_text('name = "bad"\nbatch_size = "lots"\n')
    code, out, err = pacer(live_server_api, token, "runs", "create", str(config))
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0] == "error: HTTP 400: the run config is refused"
    assert "  batch_size: must be an integer, got 'lots'" in lines
    assert "  engine: at least one [[engine]] is required" in lines
    config.write_text("name = ")
    code, _, err = pacer(live_server_api, token, "runs", "create", str(config))
    assert code == 1 and err.startswith("error: HTTP 400: the TOML does not parse")


def test_ack_with_a_checkpoint_and_its_refusal_at_the_field(
    live_server_api: LiveServer, tmp_path: Path
) -> None:
    token = make_account("olga", "operator").token
    run = make_run(config={"name": "r", "trainer": {"mode": "external"}}, output_dir=str(tmp_path))
    make_step(run, 1)
    code, out, err = pacer(
        live_server_api, token, "runs", "ack", str(run.pk), "1", "--policy-version", "1",
        "--checkpoint", "ckpt/v1",
    )  # fmt: skip
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "error: HTTP 400: the request is invalid",
        "  checkpoint: 'ckpt/v1' does not exist",
    ]
    folder = model_folder(tmp_path / "ckpt" / "v1")
    code, out, err = pacer(
        live_server_api, token, "runs", "ack", str(run.pk), "1", "--policy-version", "1",
        "--checkpoint", "ckpt/v1",
    )  # fmt: skip
    assert code == 0, err
    assert out == f"step 1 acknowledged (policy version 1, weights in {folder.resolve()})\n"
    assert StepRecord.objects.get(run=run, step=1).acked_checkpoint == str(folder.resolve())


def test_override_pending_refused_and_bad_usage(live_server_api: LiveServer) -> None:
    operator = make_account("olga", "operator").token
    viewer = make_account("victor", "viewer").token
    run = make_run(state=RunState.QUEUED)
    code, out, err = pacer(
        live_server_api, operator, "runs", "override", str(run.pk),
        "--pin", "64", "--ttl", "10m", "--reason", "KV tests", "--no-wait",
    )  # fmt: skip
    assert code == 0, err
    override = Override.objects.get()
    assert (override.mode, override.cap, override.ttl_s) == ("pin", 64, 600.0)
    assert override.reason == "KV tests" and override.created_by.username == "olga"  # type: ignore[union-attr]
    assert out.startswith(f"override {override.pk} (pin 64) pending: http")
    code, _, err = pacer(live_server_api, viewer, "runs", "override", str(run.pk), "--release")
    assert (
        code == 1
        and err == "error: HTTP 403: this needs the operator role; your account is a viewer\n"
    )
    code, _, err = pacer(live_server_api, operator, "runs", "override", str(run.pk), "--set", "0")
    assert code == 1 and "  cap: Ensure this value is greater than or equal to 1." in err
    code, _, err = pacer(live_server_api, operator, "runs", "override", str(run.pk), "--pin", "8")
    assert code == 2 and "--pin needs --ttl" in err
    code, _, err = pacer(
        live_server_api, operator, "runs", "override", str(run.pk), "--pin", "8", "--ttl", "soon"
    )
    assert code == 2 and "is not a duration" in err
    code, _, err = pacer(live_server_api, operator, "runs", "stop", str(run.pk), "--reason", "x")
    assert code == 0 and Run.objects.get(pk=run.pk).state == RunState.CANCELLED
    code, _, err = pacer(live_server_api, operator, "runs", "stop", str(run.pk))
    assert code == 1 and "has ended (cancelled)" in err
    assert (
        pacer(live_server_api, operator, "runs", "show", "999999")[2]
        == "error: HTTP 404: not found\n"
    )


def test_no_token_and_no_server_are_told_apart() -> None:
    err = io.StringIO()
    assert main(["--url", "http://127.0.0.1:1", "--token", "", "runs", "list"], err=err) == 2
    assert "no API token" in err.getvalue()
    err = io.StringIO()
    code = main(
        ["--url", f"http://127.0.0.1:{free_port()}", "--token", "t", "runs", "list"], err=err
    )
    assert code == 3 and "ConnectError" in err.getvalue()


def test_stored_decisions_print_as_their_reasons_and_follow_ends_with_the_run(
    live_server_api: LiveServer,
) -> None:
    token = make_account("victor", "viewer").token
    run = make_run(state=RunState.COMPLETED)
    made = make_decisions(run, 3)
    code, out, _ = pacer(live_server_api, token, "runs", "decisions", str(run.pk))
    assert code == 0
    assert out.splitlines() == [f"2026-11-30 12:00:0{i} {d.reason}" for i, d in enumerate(made)]
    code, out, _ = pacer(live_server_api, token, "runs", "decisions", str(run.pk), "--follow")
    assert code == 0
    assert out.splitlines()[-1] == f"run {run.pk} completed"
    assert len(out.splitlines()) == 4
    code, out, _ = pacer(
        live_server_api, token, "runs", "decisions", str(run.pk), "--since", str(made[1].pk)
    )
    assert out.splitlines() == [f"2026-11-30 12:00:02 {made[2].reason}"]


def test_engines_add_list_remove(live_server_api: LiveServer) -> None:
    token = make_account("olga", "operator").token
    code, out, err = pacer(
        live_server_api, token, "engines", "add", "gpu-0", "http://10.0.0.5:8000",
        "--max-num-seqs", "256",
    )  # fmt: skip
    assert (code, out) == (0, "engine gpu-0: http://10.0.0.5:8000 (unified)\n"), err
    code, out, _ = pacer(live_server_api, token, "engines", "add", "gpu-0", "http://10.0.0.6:8000")
    assert code == 0 and Engine.objects.get().url == "http://10.0.0.6:8000"
    code, out, _ = pacer(live_server_api, token, "engines", "list")
    row = out.splitlines()[1].split()
    assert row == ["gpu-0", "http://10.0.0.6:8000", "unified", "-", "unknown", "-", "-"]
    code, out, _ = pacer(live_server_api, token, "--json", "engines", "list")
    assert '"name": "gpu-0"' in out
    assert pacer(live_server_api, token, "engines", "remove", "gpu-0")[0] == 0
    assert not Engine.objects.exists()


def test_the_console_script_runs_as_its_own_process(live_server_api: LiveServer) -> None:
    token = make_account("olga", "operator").token
    make_run(name="in-a-process")
    env = {**os.environ, "PACER_URL": live_server_api.url, "PACER_TOKEN": token}
    done = subprocess.run(
        [sys.executable, "-m", "pacer_cli", "runs", "list", "--name", "process"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "in-a-process" in done.stdout


def test_exports_stream_over_asgi_in_chunks(live_server_api: LiveServer) -> None:
    """Under daphne the body is an async iterator of keyset chunks (2,000 rows each)."""
    token = make_account("victor", "viewer").token
    run = make_run()
    made = make_decisions(run, 4500)
    headers = {"Authorization": f"Token {token}"}
    url = f"{live_server_api.url}/api/runs/{run.pk}/export/decisions/"
    with httpx.stream("GET", url, params={"format": "csv"}, headers=headers, timeout=60) as csv:
        assert csv.status_code == 200
        assert csv.headers["content-type"] == "text/csv; charset=utf-8"
        assert "content-length" not in csv.headers  # streamed, not assembled first
        lines = b"".join(csv.iter_bytes()).decode().splitlines()
    assert lines[0].startswith("id,run,step,at,kind")
    assert [int(line.split(",")[0]) for line in lines[1:]] == [d.pk for d in made]
    as_json = httpx.get(url, params={"format": "json"}, headers=headers, timeout=60).json()
    assert [d["id"] for d in as_json] == [d.pk for d in made]
    refused = httpx.get(url, params={"format": "xml"}, headers=headers, timeout=60)
    assert refused.status_code == 400 and refused.json()["errors"]["format"]


def test_compare_prints_the_summaries_and_the_config_differences(
    live_server_api: LiveServer,
) -> None:
    token = make_account("victor", "viewer").token
    env = [{"name": "multiturn", "args": {"turns": 2}}]
    first = make_run(
        name="short",
        config={"name": "short", "max_steps": 10, "env": env},
        state=RunState.COMPLETED,
        step=10,
        cap=96,
        generation_tokens_per_s=1234.4,
    )
    make_step(first, 10)  # reward_mean 0.25
    second = make_run(
        name="long",
        config={
            "name": "long",
            "max_steps": 10,
            "concurrency": {"policy": "reference", "reference": {"trim_kv_usage": 0.8}},
            "env": [{"name": "multiturn", "args": {"turns": 4}}],
        },
        step=2,
        cap=40,
    )
    code, out, err = pacer(live_server_api, token, "runs", "compare", str(first.pk), str(second.pk))
    assert code == 0, err
    summary, differences = out.rstrip("\n").split("\n\n")
    header, one, other = summary.splitlines()
    assert header.split() == [
        "ID", "NAME", "STATE", "POLICY", "STEP", "CAP", "TOK/S", "REWARD", "STARTED"
    ]  # fmt: skip
    assert one.split() == [str(first.pk), "short", "completed", "pacer", "10/10", "96", "1234",
                           "0.250", "-"]  # fmt: skip
    assert other.split() == [str(second.pk), "long", "running", "reference", "2/10", "40", "0",
                             "-", "-"]  # fmt: skip
    assert [line.split() for line in differences.splitlines()] == [
        ["CONFIG", f"#{first.pk}", f"#{second.pk}"],
        ["concurrency.policy", "(absent)", "reference"],
        ["concurrency.reference.trim_kv_usage", "(absent)", "0.8"],
        ["env[0].args.turns", "2", "4"],
        ["name", "short", "long"],
    ]

    code, out, _ = pacer(
        live_server_api, token, "--json", "runs", "compare", str(first.pk), str(second.pk)
    )
    answer = httpx.get(
        f"{live_server_api.url}/api/runs/compare/",
        params={"runs": f"{first.pk},{second.pk}"},
        headers={"Authorization": f"Token {token}"},
    )
    assert code == 0 and json.loads(out) == answer.json()

    code, out, err = pacer(live_server_api, token, "runs", "compare", str(first.pk))
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "error: HTTP 400: the request is invalid",
        "  runs: compares 2 to 4 runs, got 1",
    ]
    missing = second.pk + 100
    code, _, err = pacer(live_server_api, token, "runs", "compare", str(first.pk), str(missing))
    assert (code, err) == (1, f"error: HTTP 404: no such run: {missing}\n")
