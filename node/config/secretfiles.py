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
    one_of = "give exactly one of `token`, `token_sha256` or `token_file`"
    for i, entry in enumerate(config.auth.tokens):
        where = f"{source}: auth.tokens[{i}]"
        if entry.token_file is not None and entry.token_sha256 is not None:
            yield f"{where}: {one_of}"
        else:
            yield from _fill(config, entry, "token", where, one_of)
    for i, peer in enumerate(config.peers):
        yield from _fill(config, peer, "token", f"{source}: peers[{i}]")
    yield from _fill(config, config.mesh, "nats_password", f"{source}: mesh")
    for i, channel in enumerate(config.notifications.channels):  # delivery (issue 47)
        for key in ("url", "secret"):
            yield from _fill(config, channel, key, f"{source}: notifications.channels[{i}]")
    for alias, model in config.inference.models.items():  # inference (issue 54)
        yield from _fill(config, model, "api_key", f"{source}: inference.models.{alias}")
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


def _fill(config: Config, holder: object, key: str, where: str, both: str = "") -> Iterator[str]:
    """Set `holder.<key>` from `holder.<key>_file` when that is given (never both)."""
    path_text = getattr(holder, f"{key}{FILE_SUFFIX}")
    if path_text is None:
        return
    if getattr(holder, key) is not None:
        yield f"{where}: {both or f'give `{key}` or `{key}{FILE_SUFFIX}`, not both'}"
        return
    value, problem = _read(config, path_text, f"{where}.{key}{FILE_SUFFIX}")
    if problem:
        yield problem
    setattr(holder, key, value)


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
