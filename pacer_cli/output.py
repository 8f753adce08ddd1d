"""How the CLI prints what the API answers: tables for lists, one line per decision, runs
side by side."""

from __future__ import annotations

import json
from typing import Any


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header, *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def short_time(iso: str | None) -> str:
    """``2026-12-01T10:47:02.317533Z`` as ``2026-12-01 10:47:02.317``."""
    if not iso:
        return "-"
    text = iso.replace("T", " ").removesuffix("Z").removesuffix("+00:00")
    date, _, fraction = text.partition(".")
    return f"{date}.{fraction[:3]}" if fraction else date


def run_table(runs: list[dict[str, Any]]) -> str:
    if not runs:
        return "no runs"
    rows = [
        [
            r["id"],
            r["name"],
            r["state"],
            r["step"],
            r["cap"],
            r["policy_cap"],
            f"{r['inflight_train']}+{r['inflight_eval']}",
            f"{r['generation_tokens_per_s']:.0f}",
            short_time(r["created_at"]),
        ]
        for r in runs
    ]
    header = ["ID", "NAME", "STATE", "STEP", "CAP", "POLICY CAP", "INFLIGHT", "TOK/S", "CREATED"]
    return table(rows, header)


def run_detail(run: dict[str, Any]) -> str:
    lines = [
        f"run {run['id']}: {run['name']} ({run['state']})",
        f"  step {run['step']}, policy version {run['policy_version']}, "
        f"eval waves {run['eval_waves']}",
        f"  cap {_cell(run['cap'])}"
        + (f" (pinned; the policy's own: {run['policy_cap']})" if run["policy_cap"] else ""),
        f"  in flight: {run['inflight_train']} train, {run['inflight_eval']} eval; "
        f"{run['generation_tokens_per_s']:.0f} tokens/s",
        f"  model {_cell(run['model'])}, output {_cell(run['output_dir'])}",
        f"  host {_cell(run['host'])}",
        f"  created {short_time(run['created_at'])} by {_cell(run['created_by'])}, "
        f"started {short_time(run['started_at'])}, finished {short_time(run['finished_at'])}",
    ]
    if run["error"]:
        lines.append(f"  error: {run['error']}")
    return "\n".join(lines)


def decision_line(decision: dict[str, Any]) -> str:
    """A decision as its reason, after its time (and a mark when it needs attention)."""
    mark = " !" if decision.get("alert") else ""
    return f"{short_time(decision['at'])}{mark} {decision['reason']}"


def engine_table(engines: list[dict[str, Any]]) -> str:
    if not engines:
        return "no engines"
    rows = [
        [
            e["name"],
            e["url"],
            e["role"],
            e["max_num_seqs"],
            e["status"],
            "-" if e["staleness_s"] is None else f"{e['staleness_s']:.0f}s",
            ",".join(str(r) for r in e["runs"]),
        ]
        for e in engines
    ]
    text = table(rows, ["NAME", "URL", "ROLE", "MAX_SEQS", "STATUS", "SEEN", "RUNS"])
    warnings = [f"warning: {e['name']}: {w}" for e in engines for w in e["warnings"]]
    return "\n".join([text, *warnings])


def rule_table(rules: list[dict[str, Any]]) -> str:
    if not rules:
        return "no alert rules"
    rows = [
        [
            r["id"],
            r["name"],
            r["body_format"],
            "all" if r["run"] is None else r["run"],
            "on" if r["enabled"] else "off",
            ",".join(r["kinds"]),
            r["url"],
        ]
        for r in rules
    ]
    return table(rows, ["ID", "NAME", "FORMAT", "RUNS", "ENABLED", "KINDS", "URL"])


def delivery_table(deliveries: list[dict[str, Any]]) -> str:
    if not deliveries:
        return "no deliveries"
    rows = [
        [
            short_time(d["created_at"]),
            d["rule"],
            d["run"],
            d["kind"],
            d["event"],
            d["state"],
            d["attempts"],
            d["answer"],
        ]
        for d in deliveries
    ]
    return table(rows, ["AT", "RULE", "RUN", "KIND", "EVENT", "STATE", "ATTEMPTS", "ANSWER"])


def config_value(value: dict[str, Any]) -> str:
    """One run's value of a differing config field: strings as they are, other values as
    JSON (``null`` too), and a field the run's config lacks as ``(absent)``."""
    if not value["present"]:
        return "(absent)"
    inner = value["value"]
    return inner if isinstance(inner, str) else json.dumps(inner, separators=(", ", ": "))


def comparison(body: dict[str, Any]) -> str:
    """The runs' summaries, then their config fields that differ, a column per run."""
    runs = body["runs"]
    rows = [
        [
            r["id"],
            r["name"],
            r["state"],
            r["policy"],
            f"{r['step']}/{r['max_steps']}" if r["max_steps"] is not None else r["step"],
            r["cap"],
            f"{r['generation_tokens_per_s']:.0f}",
            None if r["latest_reward"] is None else f"{r['latest_reward']:.3f}",
            short_time(r["started_at"]),
        ]
        for r in runs
    ]
    header = ["ID", "NAME", "STATE", "POLICY", "STEP", "CAP", "TOK/S", "REWARD", "STARTED"]
    summary = table(rows, header)
    if not body["differences"]:
        return f"{summary}\n\nconfigs: no differences"
    fields = [[d["path"], *[config_value(v) for v in d["values"]]] for d in body["differences"]]
    differences = table(fields, ["CONFIG", *[f"#{r['id']}" for r in runs]])
    return f"{summary}\n\n{differences}"


def override_text(override: dict[str, Any]) -> str:
    """An override in a line: what it asked, and what became of it."""
    what = override["mode"]
    if override.get("cap") is not None:
        what += f" {override['cap']}"
    if override.get("engine"):
        what += f" {override['engine']}"
    if override.get("share") is not None:
        what += f" x{override['share']:g}"
    if override.get("priority") is not None:
        what += f" p{override['priority']}"
    if override["status"] == "applied" and override.get("decision"):
        return f"override {override['id']} ({what}) applied: {override['decision']['reason']}"
    if override["status"] == "applied":
        return f"override {override['id']} ({what}) applied"
    if override["status"] == "error":
        return f"override {override['id']} ({what}) refused by the run: {override['error']}"
    return f"override {override['id']} ({what}) {override['status']}: {override['url']}"
