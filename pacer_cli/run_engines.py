"""``pacer runs engines|add-engine|remove-engine|share``: a run's engines, changed while it
runs, and its share of engines other runs share (see the README's sections on both)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from pacer_cli.client import Api
from pacer_cli.durations import parse_duration
from pacer_cli.exit_codes import EXIT_REFUSED, EXIT_USAGE
from pacer_cli.output import override_text


def add_run_engines_parsers(runs: Any) -> None:
    """The commands, under the ``runs`` group's subparsers."""
    listing = runs.add_parser("engines", help="the run's engines")
    listing.add_argument("run", type=int)
    add = runs.add_parser("add-engine", help="add an engine to the run (it takes groups at once)")
    add.add_argument("run", type=int)
    add.add_argument("engine", help="a registered engine's name, or an engine's URL")
    add.add_argument("--reason", default="")
    add.add_argument("--no-wait", action="store_true", help="do not wait for the run")
    remove = runs.add_parser(
        "remove-engine", help="take an engine out of the run (it drains first)"
    )
    remove.add_argument("run", type=int)
    remove.add_argument("engine", help="as `pacer runs engines` names it")
    remove.add_argument(
        "--drain", help="how long its episodes may finish: 30s, 5m (default 2m); then cancelled"
    )
    remove.add_argument("--reason", default="")
    remove.add_argument("--no-wait", action="store_true", help="do not wait for the run")
    share = runs.add_parser("share", help="the run's share and priority of shared engines")
    share.add_argument("run", type=int)
    share.add_argument("--share", type=float, help="its weight among the runs (default 1)")
    share.add_argument("--priority", type=int, help="higher is served first (default 0)")
    share.add_argument("--reason", default="")
    share.add_argument("--no-wait", action="store_true", help="do not wait for the run")


class RunEngineCommands:
    """The commands, for the CLI's command class: it supplies what is declared here."""

    api: Api
    args: argparse.Namespace
    err: TextIO

    def emit(self, data: Any, text: str) -> None: ...

    def _settled(self, override: dict[str, Any]) -> dict[str, Any]: ...

    def runs_engines(self) -> int:
        rows = self.api.get(f"/api/runs/{self.args.run}/engines/")
        self.emit(rows, "\n".join(f"{row['name']:<32} {row['url']}" for row in rows))
        return 0

    def runs_add_engine(self) -> int:
        body = {"engine": self.args.engine, "reason": self.args.reason}
        return self._engine_command(f"/api/runs/{self.args.run}/engines/", body)

    def runs_remove_engine(self) -> int:
        body: dict[str, Any] = {"reason": self.args.reason}
        if self.args.drain:
            try:
                body["drain_s"] = parse_duration(self.args.drain)
            except ValueError as bad:
                print(f"error: --drain: {bad}", file=self.err)
                return EXIT_USAGE
        path = f"/api/runs/{self.args.run}/engines/{self.args.engine}/remove/"
        return self._engine_command(path, body)

    def runs_share(self) -> int:
        if self.args.share is None and self.args.priority is None:
            print("error: give --share, --priority or both", file=self.err)
            return EXIT_USAGE
        body: dict[str, Any] = {"reason": self.args.reason}
        if self.args.share is not None:
            body["share"] = self.args.share
        if self.args.priority is not None:
            body["priority"] = self.args.priority
        return self._engine_command(f"/api/runs/{self.args.run}/share/", body)

    def _engine_command(self, path: str, body: dict[str, Any]) -> int:
        override = self.api.post(path, body)
        if not self.args.no_wait:
            override = self._settled(override)
        self.emit(override, override_text(override))
        return EXIT_REFUSED if override["status"] == "error" else 0
