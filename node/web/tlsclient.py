"""The trust of an HTTPS client: the node's to its peers (node/web/tls.py) and the CLI's
(`--ca-file`, AGENT_NODE_CA_FILE). `ssl` only, so the CLI's commands reach a node without
loading the server's TLS (aiohttp)."""

from __future__ import annotations

import ssl
from pathlib import Path


def client_context(ca_file: str | Path | None) -> ssl.SSLContext:
    """Verifies servers against `ca_file` only (a private CA, a self-signed certificate), or
    the system's trust store without one. Host names are always checked."""
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
