"""What a config exposes beyond this host: credentials others can read, the example tokens on
a reachable address, plain HTTP on one (docs/security.md, "What the node refuses").

`config check` reports all of it; the node refuses to start on problems (`public_problems` is
part of the config's checks) and logs each warning at start. The config file itself is a
special case: `config check` refuses one with plaintext credentials that others may read, the
node only warns (the example config of a checkout is 0644: refusing would stop `scripts/run`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node.ops.filemodes import exposure

if TYPE_CHECKING:
    from node.config.model import Config

# The tokens shipped in examples/ and the docs: anyone may know them. A test keeps this list
# in step with examples/*.toml.
EXAMPLE_TOKENS = (
    "dev-admin-token-change-me",
    "dev-finance-token-change-me",
    "dev-reader-token-change-me",
)
_EXAMPLE_DIGESTS = {hashlib.sha256(t.encode()).hexdigest(): t for t in EXAMPLE_TOKENS}
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain")
log = logging.getLogger("agent-node")


def warn_at_start(config: Config, path: Path) -> None:
    """Log, loudly, what the node starts with anyway (the module's docstring says why)."""
    for warning in [*public_warnings(config, str(path)), config_file_problem(path)]:
        if warning:
            log.warning("INSECURE: %s", warning)


def is_loopback(host: str) -> bool:
    """True when only this host can connect to `host` (an IP literal or localhost)."""
    host = host.strip("[]")
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name or "" (every address): reachable, as far as we know


def _listen_host(config: Config) -> str:
    return config.node.listen.rpartition(":")[0]


def public_problems(config: Config, source: str) -> Iterator[str]:
    """An example token accepted on an address others can reach: refused."""
    if is_loopback(_listen_host(config)):
        return
    for i, entry in enumerate(config.auth.tokens):
        known = entry.token if entry.token in EXAMPLE_TOKENS else None
        known = known or _EXAMPLE_DIGESTS.get(entry.token_sha256 or "")
        if known:
            yield (
                f"{source}: auth.tokens[{i}]: the example token {known!r} on node.listen = "
                f"{config.node.listen!r}, an address other hosts can reach: anyone who read "
                "the examples would be let in; make a token with `agent-node token new`"
            )


def public_warnings(config: Config, source: str) -> Iterator[str]:
    """Plain HTTP on an address others can reach: tokens cross the network readable."""
    if config.node.tls_cert_file is None and not is_loopback(_listen_host(config)):
        yield (
            f"{source}: node.listen: {config.node.listen!r} is reachable from other hosts "
            "and serves plain HTTP: bearer tokens and data cross the network readable; set "
            "node.tls_cert_file and node.tls_key_file, or listen on 127.0.0.1 behind a TLS "
            "proxy (docs/deploy.md)"
        )


def config_file_problem(path: Path) -> str | None:
    """The config at `path` holds plaintext credentials and others may read it."""
    why = exposure(path)
    if why is None:
        return None
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None  # reported by the config's own checks
    keys = plaintext_credentials(raw)
    if not keys:
        return None
    shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
    return f"{path}: holds plaintext credentials ({shown}) and {why}"


def plaintext_credentials(raw: dict[str, Any]) -> list[str]:
    """The keys of a parsed config that hold a credential itself (not a file or a hash)."""
    keys = []
    auth = raw.get("auth")
    tokens = auth.get("tokens", []) if isinstance(auth, dict) else []
    for i, entry in enumerate(tokens if isinstance(tokens, list) else []):
        if isinstance(entry, dict) and "token" in entry:
            keys.append(f"auth.tokens[{i}].token")
    peers = raw.get("peers", [])
    for i, peer in enumerate(peers if isinstance(peers, list) else []):
        if isinstance(peer, dict) and "token" in peer:
            keys.append(f"peers[{i}].token")
    mesh = raw.get("mesh")
    if isinstance(mesh, dict) and "nats_password" in mesh:
        keys.append("mesh.nats_password")
    secrets = raw.get("secrets")
    for domain, values in (secrets if isinstance(secrets, dict) else {}).items():
        for key in values if isinstance(values, dict) else {}:
            if not key.endswith("_file"):
                keys.append(f"secrets.{domain}.{key}")
    return keys
