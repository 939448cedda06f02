"""`agent-node run`'s logging flags: argparse only, so the CLI builds its parser without loading
the logging set-up of node/ops/logsetup.py (aiohttp, the config's model)."""

from __future__ import annotations

import argparse

LEVELS = ("debug", "info", "warning", "error", "critical")
ACCESS_LOGGER = "agent-node.access"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`agent-node run`'s logging flags."""
    parser.add_argument("--log-level", choices=LEVELS, default="info", help="default info")
    parser.add_argument(
        "--log-format", choices=("text", "json"), default="text", help="json: one object a line"
    )
    parser.add_argument(
        "--access-log", action="store_true", help=f"one line per request (logger {ACCESS_LOGGER})"
    )
