"""``pacer alerts``: alert rules and what they sent (see the README's Alerts section)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from pacer_cli.client import Api
from pacer_cli.durations import parse_duration
from pacer_cli.exit_codes import EXIT_USAGE
from pacer_cli.output import delivery_table, rule_table

# The rule's thresholds as flags; durations take 90s, 5m and the like.
THRESHOLD_FLAGS = {
    "storm_preemptions_per_s": "preemptions a second that make a storm (default 1)",
    "storm_polls": "polls in a row over it (default 3)",
    "engine_down_s": "how long an engine is down or stale before it is told (default 60s)",
    "pin_expiring_s": "how long before a pin lapses it is told (default 5m)",
    "idle_s": "how long without a step a running run is idle (default 30m)",
}


def add_alerts_parser(groups: Any) -> None:
    """The ``alerts`` group's commands, under the top parser's ``groups``."""
    alerts = groups.add_parser("alerts", help="alert rules and their notifications")
    alert_commands = alerts.add_subparsers(dest="command", required=True)
    alert_commands.add_parser("list", help="the alert rules")
    rule = alert_commands.add_parser("add", help="a webhook told of the conditions it names")
    rule.add_argument("name")
    rule.add_argument("hook_url", metavar="URL", help="where notifications are POSTed")
    rule.add_argument("--format", dest="body_format", default="json", choices=["json", "slack"])
    rule.add_argument("--run", type=int, help="only this run's conditions (default: every run)")
    rule.add_argument(
        "--kind",
        action="append",
        dest="kinds",
        help="a condition to fire on (repeat; default: every one): preemption_storm, "
        "engine_down, pin_expiring, run_failed, run_completed, run_idle, reconcile",
    )
    for name, unit in THRESHOLD_FLAGS.items():
        rule.add_argument(f"--{name.replace('_', '-')}", dest=name, help=unit)
    drop = alert_commands.add_parser("remove", help="remove an alert rule")
    drop.add_argument("rule", type=int)
    deliveries = alert_commands.add_parser("deliveries", help="notifications and their answers")
    deliveries.add_argument("--rule", type=int)
    deliveries.add_argument("--run", type=int)


class AlertCommands:
    """The ``alerts`` commands, for the CLI's command class: it supplies what is declared here."""

    api: Api
    args: argparse.Namespace
    err: TextIO

    def emit(self, data: Any, text: str) -> None: ...

    def alerts_list(self) -> int:
        rows = self.api.get("/api/alerts/rules/")
        self.emit(rows, rule_table(rows))
        return 0

    def alerts_add(self) -> int:
        args = self.args
        body: dict[str, Any] = {"name": args.name, "url": args.hook_url}
        body["body_format"] = args.body_format
        if args.run is not None:
            body["run"] = args.run
        if args.kinds:
            body["kinds"] = args.kinds
        for name in THRESHOLD_FLAGS:
            value = getattr(args, name)
            if value is None:
                continue
            try:
                body[name] = int(value) if name == "storm_polls" else _seconds(name, value)
            except ValueError as bad:
                print(f"error: --{name.replace('_', '-')}: {bad}", file=self.err)
                return EXIT_USAGE
        rule = self.api.post("/api/alerts/rules/", body)
        self.emit(rule, f"alert rule {rule['id']} ({rule['name']}): {', '.join(rule['kinds'])}")
        return 0

    def alerts_remove(self) -> int:
        self.api.request("DELETE", f"/api/alerts/rules/{self.args.rule}/")
        self.emit({"removed": self.args.rule}, f"alert rule {self.args.rule} removed")
        return 0

    def alerts_deliveries(self) -> int:
        params = {"rule": self.args.rule, "run": self.args.run}
        rows = self.api.get("/api/alerts/deliveries/", **params)
        self.emit(rows, delivery_table(rows))
        return 0


def _seconds(name: str, value: str) -> float:
    """A rate as a number; a duration as seconds (``90s``, ``5m``, or a bare number)."""
    return float(value) if name == "storm_preemptions_per_s" else parse_duration(value)
