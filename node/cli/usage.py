"""`agent-node usage [--agent A] [--since 30d]`: what each agent's inference used and cost,
per model (GET /api/v1/usage)."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import urlencode

from node.cli.node_api import Node, emit, table

COLUMNS = [
    ("agent", "agent"),
    ("model", "model"),
    ("calls", "calls"),
    ("errors", "errors"),
    ("refused", "refused"),
    ("input tokens", "input_tokens"),
    ("output tokens", "output_tokens"),
    ("cost", "cost"),
    ("mean ms", "mean_ms"),
]


def rows_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for agent in report["agents"]:
        rows += [{"agent": agent["agent"], **model} for model in agent["models"]]
        if len(agent["models"]) > 1:
            rows.append({**agent, "model": "(all)"})
    return rows


def cmd_usage(node: Node, args: argparse.Namespace) -> int:
    query = {"since": args.since, **({"agent": args.agent} if args.agent else {})}
    report = node.call("GET", f"/api/v1/usage?{urlencode(query)}")
    emit(args, report, lambda r: f"since {r['since']}\n" + table(rows_of(r), COLUMNS))
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", help="only this agent")
    parser.add_argument(
        "--since", default="30d", help="a duration (30d, 12h, 90m, 2w) or an ISO 8601 time"
    )
