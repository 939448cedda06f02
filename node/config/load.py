"""Reading runtime.toml: the file parsed, converted to the `Config` of node/config/model.py and
checked, every problem a `ConfigError` naming the file and the key.

Apart from node/config/model.py because the checks of the files a config names (the `*_file`
secrets, the TLS certificate and key, what listening on a public address exposes) live with
the code that uses those files (secretfiles.py, web/tls.py, exposure.py), which reads the `Config`.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from node.config.exposure import public_problems
from node.config.model import Config, ConfigError, check_config
from node.config.secretfiles import read_secret_files
from node.policy.policyset import policy_problems
from node.web.tls import tls_problems


def load_config(path: str | Path, *, load_tls: bool = True) -> Config:
    """Read and validate runtime.toml; every problem raises ConfigError naming file and key.
    `load_tls=False` (a reload) leaves loading the TLS files to the caller, so that broken
    ones cannot hold back a reload's tokens and secrets."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    if "base_dir" in raw:
        raise ConfigError(f"{path}: unknown key `base_dir`")
    raw["base_dir"] = str(path.resolve().parent)
    return parse_config(raw, str(path), load_tls=load_tls)


def parse_config(
    raw: dict[str, Any], source: str = "runtime.toml", *, load_tls: bool = True
) -> Config:
    try:
        config = msgspec.convert(raw, Config)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {_readable(str(exc))}") from exc
    for problem in config_problems(config, source, load_tls=load_tls):
        raise ConfigError(problem)
    return config


def config_problems(config: Config, source: str, *, load_tls: bool = True) -> Iterator[str]:
    """Every problem of a converted config, in order: unreadable `*_file`s, then the checks."""
    yield from read_secret_files(config, source)
    yield from check_config(config, source)
    yield from tls_problems(config, source, load=load_tls)
    yield from public_problems(config, source)
    yield from policy_problems(config, source)  # the Cedar files of [policy] (issue 47)


def _readable(message: str) -> str:
    """msgspec says `$.agents[0].foo`; operators think in TOML keys: `agents[0].foo`."""
    return message.replace("`$.", "`").replace("at `$`", "at the top level")
