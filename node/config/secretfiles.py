"""`*_file` indirection: tokens, peer tokens and secrets read from files named in the config.

So that no credential has to sit in runtime.toml: `token_file = "/run/credentials/agent-node/
admin"` (systemd's LoadCredential=, a Kubernetes or Docker secret mount). A relative path is
relative to the config file. The content is the value; trailing newlines are dropped. Files are
read when the config is loaded: at start, by `config check`, and again on SIGHUP.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from node.ops.filemodes import exposure

if TYPE_CHECKING:
    from node.config.model import Config

FILE_SUFFIX = "_file"
MAX_SECRET_FILE_BYTES = 64 * 1024


def read_secret_files(config: Config, source: str) -> Iterator[str]:
    """Fill each `token` and secret from its `*_file`; yield a problem for each that fails."""
    for i, entry in enumerate(config.auth.tokens):
        if entry.token_file is None:
            continue
        where = f"{source}: auth.tokens[{i}]"
        if entry.token is not None or entry.token_sha256 is not None:
            yield f"{where}: give exactly one of `token`, `token_sha256` or `token_file`"
            continue
        value, problem = _read(config, entry.token_file, f"{where}.token_file")
        if problem:
            yield problem
        entry.token = value
    for i, peer in enumerate(config.peers):
        if peer.token_file is None:
            continue
        where = f"{source}: peers[{i}]"
        if peer.token is not None:
            yield f"{where}: give `token` or `token_file`, not both"
            continue
        peer.token, problem = _read(config, peer.token_file, f"{where}.token_file")
        if problem:
            yield problem
    mesh = config.mesh
    if mesh.nats_password_file is not None:
        if mesh.nats_password is not None:
            yield f"{source}: mesh: give `nats_password` or `nats_password_file`, not both"
        else:
            mesh.nats_password, problem = _read(
                config, mesh.nats_password_file, f"{source}: mesh.nats_password_file"
            )
            if problem:
                yield problem
    for i, channel in enumerate(config.notifications.channels):  # delivery (issue 47)
        for key in ("url", "secret"):
            path_text = getattr(channel, f"{key}{FILE_SUFFIX}")
            if path_text is None:
                continue
            where = f"{source}: notifications.channels[{i}]"
            if getattr(channel, key) is not None:
                yield f"{where}: give `{key}` or `{key}{FILE_SUFFIX}`, not both"
                continue
            value, problem = _read(config, path_text, f"{where}.{key}{FILE_SUFFIX}")
            if problem:
                yield problem
            setattr(channel, key, value)
    for alias, model in config.inference.models.items():  # inference (issue 54)
        if model.api_key_file is None:
            continue
        where = f"{source}: inference.models.{alias}"
        if model.api_key is not None:
            yield f"{where}: give `api_key` or `api_key_file`, not both"
            continue
        model.api_key, problem = _read(config, model.api_key_file, f"{where}.api_key_file")
        if problem:
            yield problem
    for domain, values in config.secrets.items():
        for key in [k for k in values if k.endswith(FILE_SUFFIX)]:
            where = f"{source}: secrets.{domain}.{key}"
            name, path = key.removesuffix(FILE_SUFFIX), values.pop(key)
            if not isinstance(path, str):
                yield f"{where}: expected a file path (a string)"
            elif name in values:
                yield f"{where}: `{name}` is given too; keep one of them"
            else:
                value, problem = _read(config, path, where)
                if problem:
                    yield problem
                else:
                    values[name] = value


def _read(config: Config, path_text: str, where: str) -> tuple[str | None, str]:
    """(value, "") or (None, a problem naming the key and the file, never the content)."""
    path = Path(config.path(path_text))
    why = exposure(path)
    if why:  # others may have read it already: refused, not used (docs/security.md)
        return None, f"{where}: {path} {why}"
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        return None, f"{where}: cannot read {path}: {exc.strerror}"
    if len(raw) > MAX_SECRET_FILE_BYTES:
        return None, f"{where}: {path} is larger than {MAX_SECRET_FILE_BYTES} bytes"
    try:
        value = raw.decode().rstrip("\r\n")
    except UnicodeDecodeError:
        return None, f"{where}: {path} is not UTF-8 text"
    if not value:
        return None, f"{where}: {path} is empty"
    return value, ""
