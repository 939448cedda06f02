"""TLS: the node's own listener (`[node] tls_cert_file`, `tls_key_file`) and the trust used
for HTTPS to peers (`[mesh] ca_file`) and by the CLI (`--ca-file`, AGENT_NODE_CA_FILE).

SIGHUP reads the certificate and key again (a renewal; node/config/reload.py) into a new
context that new connections get (node/web/tlsaccept.py). Without a certificate
the node serves plain HTTP: fine on 127.0.0.1 or behind a TLS proxy
(docs/deploy.md), a warning anywhere else (node/config/exposure.py).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web

from node.ops.filemodes import exposure
from node.web.tlsaccept import TlsListener
from node.web.tlsclient import client_context

if TYPE_CHECKING:
    from node.config.model import Config


# the listener's context holder, kept so that SIGHUP can swap in a renewed certificate's
SERVER_TLS = web.AppKey("tls_listener", TlsListener)


def server_context(config: Config) -> ssl.SSLContext | None:
    """The listener's context (TLS 1.2 or later), or None for plain HTTP. Raises OSError or
    ssl.SSLError when the files do not load: `tls_problems` says which, with its key."""
    node = config.node
    if node.tls_cert_file is None or node.tls_key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.path(node.tls_cert_file), config.path(node.tls_key_file))
    return context


def reload_certificate(listener: TlsListener, config: Config) -> None:
    """Load the certificate and key files again (a renewal) into a new context and swap it in
    whole: new connections get it, open ones keep theirs. A pair that does not load raises
    (OSError, ssl.SSLError) and leaves the running context as it was: nothing is loaded into
    a context in use, so a file changing meanwhile cannot leave the listener without a key."""
    context = server_context(config)  # raises OSError / ssl.SSLError, naming nothing secret
    if context is not None:
        listener.context = context


def peer_context(config: Config) -> ssl.SSLContext | None:
    """For HTTPS to peers: with `[mesh] ca_file`, that CA; else None (aiohttp's default,
    the system's trust store)."""
    ca_file = config.mesh.ca_file
    return client_context(config.path(ca_file)) if ca_file else None


def tls_problems(config: Config, source: str, *, load: bool = True) -> Iterator[str]:
    """Both or neither of the certificate and key; a key others may read; files that do not
    load (unless `load` is False). Never echoes a file's content."""
    node = config.node
    where = f"{source}: node"
    if (node.tls_cert_file is None) != (node.tls_key_file is None):
        yield f"{where}: tls_cert_file and tls_key_file go together"
        return
    if node.tls_key_file is not None:
        key = config.path(node.tls_key_file)
        why = exposure(key)
        if why:
            yield f"{where}.tls_key_file: {key} {why}"
        if not load:
            return
        try:
            server_context(config)
        except (OSError, ssl.SSLError) as exc:
            yield (
                f"{where}.tls_cert_file/tls_key_file: cannot load "
                f"{config.path(node.tls_cert_file or '')} with {key}: {_reason(exc)}"
            )
    if config.mesh.ca_file is not None and load:
        try:
            peer_context(config)
        except (OSError, ssl.SSLError) as exc:
            ca_file = config.path(config.mesh.ca_file)
            yield f"{source}: mesh.ca_file: cannot load {ca_file}: {_reason(exc)}"


def _reason(exc: OSError | ssl.SSLError) -> str:
    return str(exc.strerror or exc) if isinstance(exc, OSError) else str(exc)
