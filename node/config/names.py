"""The names a config gives (agents, meshes), the token scopes, and ConfigError: `re` only, so
what needs them without the config's model (msgspec, the catalogue) stays light: the CLI's
parser, the NATS set-up helpers. node.config.model re-exports each."""

from __future__ import annotations

import re

# `(?!\n)`: Python's `$` also matches before a final newline, so "scanner\n" would pass
# msgspec's pattern check (a search); the look-ahead makes the match whole in Python and ECMA.
AGENT_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$(?!\n)"
AGENT_NAME_RE = re.compile(AGENT_NAME)
MESH_NAME = r"^[A-Za-z0-9_-]{1,32}$(?!\n)"
SCOPES = ("read", "operate", "publish", "sync", "admin")


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file and the key."""
