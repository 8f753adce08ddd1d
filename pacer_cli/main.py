"""pacer: create, watch and steer Pacer runs from a terminal.

    export PACER_URL=http://127.0.0.1:8000 PACER_TOKEN=<your API token>
    pacer runs create configs/demo.toml
    pacer runs list --state running
    pacer runs show 12
    pacer runs compare 12 15
    pacer runs override 12 --pin 64 --ttl 10m --reason "KV tests"
    pacer runs decisions 12 --follow
    pacer runs add-engine 12 http://10.0.0.7:8000
    pacer runs remove-engine 12 10.0.0.5:8000 --drain 2m
    pacer runs stop 12
    pacer engines list
    pacer alerts add on-call https://hooks.slack.com/services/T/B/X --format slack
    pacer alerts deliveries

Exit status: 0 done, 1 the API refused (its field errors are printed), 2 bad usage, 3 the
server could not be reached or the websocket was refused.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from pacer_cli.alerts import AlertCommands, add_alerts_parser
from pacer_cli.client import Api, ApiError, Unreachable
from pacer_cli.durations import parse_duration
from pacer_cli.exit_codes import EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE
from pacer_cli.follow import Follower, Refused
from pacer_cli.output import (
    comparison,
    decision_line,
    engine_table,
    override_text,
    run_detail,
    run_table,
)
from pacer_cli.run_engines import RunEngineCommands, add_run_engines_parsers

EXIT_BROKEN_PIPE = 141  # what a shell reports for a command killed by SIGPIPE
DEFAULT_URL = "http://127.0.0.1:8000"  # where ./scripts/run serves
OVERRIDE_WAIT_S = 10.0  # how long a command to a run (override, stop, ...) waits to see it act
OVERRIDE_POLL_S = 0.1


def _parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="pacer", description=__doc__.split("\n\n")[0], epilog="PACER_URL, PACER_TOKEN"
    )
    top.add_argument("--url", default=os.environ.get("PACER_URL", DEFAULT_URL))
    top.add_argument("--token", default=os.environ.get("PACER_TOKEN", ""))
    top.add_argument("--json", action="store_true", help="print the API's JSON as it is")
    groups = top.add_subparsers(dest="group", required=True)

    runs = groups.add_parser("runs", help="runs").add_subparsers(dest="command", required=True)
    create = runs.add_parser("create", help="create a run from a TOML or JSON config")
    create.add_argument("config", type=Path)
    listing = runs.add_parser("list", help="list runs, newest first")
    listing.add_argument("--state", help="comma-separated, e.g. running,paused")
    listing.add_argument("--name", help="names containing this")
    listing.add_argument("--since", help="created after this ISO 8601 time")
    listing.add_argument("--limit", type=int, default=50)
    show = runs.add_parser("show", help="one run: state, cap, in flight, config")
    show.add_argument("run", type=int)
    compare = runs.add_parser("compare", help="2 to 4 runs side by side, and how configs differ")
    compare.add_argument("runs", type=int, nargs="+", metavar="RUN")
    override = runs.add_parser("override", help="pin, set or release the run's cap")
    override.add_argument("run", type=int)
    mode = override.add_mutually_exclusive_group(required=True)
    mode.add_argument("--pin", type=int, metavar="CAP", help="hold the cap (needs --ttl)")
    mode.add_argument("--set", type=int, metavar="CAP", help="move the cap once")
    mode.add_argument("--release", action="store_true", help="end a pin")
    override.add_argument("--ttl", help="how long a pin holds: 90s, 10m, 2h")
    override.add_argument("--reason", default="")
    override.add_argument("--no-wait", action="store_true", help="do not wait for the run")
    for name in ("stop", "pause", "resume"):
        command = runs.add_parser(name, help=f"{name} the run")
        command.add_argument("run", type=int)
        command.add_argument("--reason", default="")
        command.add_argument("--no-wait", action="store_true", help="do not wait for the run")
    decisions = runs.add_parser("decisions", help="the run's decisions, one line each")
    decisions.add_argument("run", type=int)
    decisions.add_argument("--follow", "-f", action="store_true", help="then live, until it ends")
    decisions.add_argument("--kind", help="comma-separated kinds, e.g. pin,cut")
    decisions.add_argument("--since", help="an ISO 8601 time or a decision id")
    steps = runs.add_parser("steps", help="the run's written steps")
    steps.add_argument("run", type=int)
    ack = runs.add_parser("ack", help="acknowledge a step (trainer mode external)")
    ack.add_argument("run", type=int)
    ack.add_argument("step", type=int)
    ack.add_argument("--policy-version", type=int, required=True)
    ack.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="the new version's weights: a model folder inside the run's folder "
        "(or PACER_CHECKPOINTS_DIR), relative to it unless absolute",
    )

    add_run_engines_parsers(runs)

    engines = groups.add_parser("engines", help="engines").add_subparsers(
        dest="command", required=True
    )
    engines.add_parser("list", help="registered engines and their health")
    add = engines.add_parser("add", help="register an engine (or change one)")
    add.add_argument("name")
    add.add_argument("engine_url", metavar="URL", help="e.g. http://127.0.0.1:8100")
    add.add_argument("--role", default="unified", choices=["unified", "prefill", "decode"])
    add.add_argument("--max-num-seqs", type=int)
    remove = engines.add_parser("remove", help="remove an engine no active run names")
    remove.add_argument("name")

    add_alerts_parser(groups)
    return top


class Cli(AlertCommands, RunEngineCommands):
    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.args = args
        self.out = out
        self.err = err
        self.api = Api(args.url, args.token)

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def emit(self, data: Any, text: str) -> None:
        self.say(json.dumps(data, indent=2) if self.args.json else text)

    def run(self) -> int:
        handler = getattr(self, f"{self.args.group}_{self.args.command}".replace("-", "_"))
        return handler() or 0

    # -- runs -------------------------------------------------------------------------------

    def runs_create(self) -> int:
        path: Path = self.args.config
        try:
            text = path.read_text()
        except OSError as unreadable:
            print(f"error: {path}: {unreadable.strerror}", file=self.err)
            return EXIT_USAGE
        kind = "application/toml" if path.suffix != ".json" else "application/json"
        run = self.api.post("/api/runs/", content=text.encode(), headers={"Content-Type": kind})
        self.emit(run, f"run {run['id']} {run['state']} ({run['name']})")
        return 0

    def runs_list(self) -> int:
        rows = []
        params = {"state": self.args.state, "name": self.args.name}
        params["created_after"] = self.args.since
        for run in self.api.pages("/api/runs/", **params):
            rows.append(run)
            if len(rows) >= self.args.limit:
                break
        self.emit(rows, run_table(rows))
        return 0

    def runs_show(self) -> int:
        run = self.api.get(f"/api/runs/{self.args.run}/")
        self.emit(run, run_detail(run))
        return 0

    def runs_compare(self) -> int:
        ids = ",".join(str(run) for run in self.args.runs)
        body = self.api.get("/api/runs/compare/", runs=ids)
        self.emit(body, comparison(body))
        return 0

    def runs_override(self) -> int:
        args = self.args
        if args.pin is not None:
            if not args.ttl:
                print("error: --pin needs --ttl (e.g. --ttl 10m)", file=self.err)
                return EXIT_USAGE
            body: dict[str, Any] = {"mode": "pin", "cap": args.pin}
        elif args.set is not None:
            body = {"mode": "set", "cap": args.set}
        else:
            body = {"mode": "release"}
        if args.ttl:
            try:
                body["ttl_s"] = parse_duration(args.ttl)
            except ValueError as bad:
                print(f"error: --ttl: {bad}", file=self.err)
                return EXIT_USAGE
        body["reason"] = args.reason
        override = self.api.post(f"/api/runs/{args.run}/override/", body)
        if not args.no_wait:
            override = self._settled(override)
        self.emit(override, override_text(override))
        return EXIT_REFUSED if override["status"] == "error" else 0

    def _settled(self, override: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + OVERRIDE_WAIT_S
        while override["status"] == "pending" and time.monotonic() < deadline:
            time.sleep(OVERRIDE_POLL_S)
            override = self.api.request("GET", override["url"])
        return override

    def _command(self, name: str) -> int:
        """Stop, pause or resume, then (as an override does) wait a while for the run's host to
        act: "pending" alone would leave the user to ask again whether the run stopped."""
        override = self.api.post(f"/api/runs/{self.args.run}/{name}/", {"reason": self.args.reason})
        if not self.args.no_wait:
            override = self._settled(override)
        self.emit(override, f"{name}: {override_text(override)}")
        return EXIT_REFUSED if override["status"] == "error" else 0

    def runs_stop(self) -> int:
        return self._command("stop")

    def runs_pause(self) -> int:
        return self._command("pause")

    def runs_resume(self) -> int:
        return self._command("resume")

    def runs_decisions(self) -> int:
        args = self.args
        show = (lambda d: self.say(json.dumps(d))) if args.json else self._decision
        if not args.follow:
            path = f"/api/runs/{args.run}/decisions/"
            for decision in self.api.pages(path, kind=args.kind, since=args.since, page_size=1000):
                show(decision)
            return 0
        self.api.get(f"/api/runs/{args.run}/")  # a clear 401 or 404 before the websocket
        follower = Follower(
            self.api, args.run, show, kinds=args.kind, since=args.since, ended=self._ended
        )
        asyncio.run(follower.run())
        return 0

    def _decision(self, decision: dict[str, Any]) -> None:
        self.say(decision_line(decision))

    def _ended(self, state: str, error: str) -> None:
        if not self.args.json:
            self.say(f"run {self.args.run} {state}" + (f": {error}" if error else ""))

    def runs_steps(self) -> int:
        rows = list(self.api.pages(f"/api/runs/{self.args.run}/steps/"))
        lines = [
            f"step {s['step']:>5}  v{s['policy_version']:<4} {s['episodes']:>5} episodes  "
            f"{s['seconds']:7.2f} s  reward {s['reward_mean']:.3f}  cap {s['cap']}"
            for s in rows
        ]
        self.emit(rows, "\n".join(lines) or "no steps yet")
        return 0

    def runs_ack(self) -> int:
        body: dict[str, object] = {"policy_version": self.args.policy_version}
        if self.args.checkpoint is not None:
            body["checkpoint"] = self.args.checkpoint
        result = self.api.post(f"/api/runs/{self.args.run}/steps/{self.args.step}/ack/", body)
        verb = "acknowledged" if result["acknowledged"] else "already acknowledged"
        weights = result["step"]["acked_checkpoint"]
        line = f"step {self.args.step} {verb} (policy version {body['policy_version']}"
        self.emit(result, line + (f", weights in {weights})" if weights else ")"))
        return 0

    # -- engines ----------------------------------------------------------------------------

    def engines_list(self) -> int:
        rows = self.api.get("/api/engines/")
        self.emit(rows, engine_table(rows))
        return 0

    def engines_add(self) -> int:
        args = self.args
        body = {"url": args.engine_url, "role": args.role, "max_num_seqs": args.max_num_seqs}
        try:
            engine = self.api.request("PUT", f"/api/engines/{args.name}/", json=body)
        except ApiError as missing:
            if missing.status != 404:
                raise
            engine = self.api.post("/api/engines/", {"name": args.name, **body})
        self.emit(engine, f"engine {engine['name']}: {engine['url']} ({engine['role']})")
        return 0

    def engines_remove(self) -> int:
        self.api.request("DELETE", f"/api/engines/{self.args.name}/")
        self.emit({"removed": self.args.name}, f"engine {self.args.name} removed")
        return 0


def print_error(error: ApiError, err: TextIO) -> None:
    print(f"error: {error}", file=err)
    for path, messages in error.errors.items():
        for message in messages:
            print(f"  {path}: {message}", file=err)
    if error.retry_after_s is not None:
        print(f"  retry after {error.retry_after_s} s", file=err)


def main(
    argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    args = _parser().parse_args(argv)
    if not args.token:
        print("error: no API token: set PACER_TOKEN or pass --token", file=err)
        return EXIT_USAGE
    cli = Cli(args, out, err)
    try:
        return cli.run()
    except ApiError as refused:
        print_error(refused, err)
        return EXIT_REFUSED
    except (Unreachable, Refused) as failed:
        print(f"error: {failed}", file=err)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (``| head``): end quietly, as other tools do
        if out is sys.stdout:  # so the interpreter's last flush at exit cannot fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    finally:
        cli.api.close()
