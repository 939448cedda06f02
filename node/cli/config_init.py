"""`agent-node config init`: a first runtime.toml that a node starts on, for an install from pip.

It holds the node's name, where it listens, its data folder and one admin token, of which only
the SHA-256 is written; the token itself is printed once. The file is created with mode 0600
(it names the node's credentials' hashes and will hold secrets), and an existing file is never
overwritten.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from node.cli.docs import documented_parser
from node.config.names import AGENT_NAME_RE, ConfigError

TEMPLATE = """\
# runtime.toml of agent-node, made by `agent-node config init`.
# Every key: `agent-node docs configuration`; an editor schema: `agent-node config schema`.
# Relative paths (data_dir, components, *_file) are relative to this file's folder.

[node]
name = "{name}"
listen = "{listen}"
data_dir = "data"

# The admin token was printed once by `config init`; only its SHA-256 is kept here.
# More tokens: `agent-node token new NAME --scopes read` (scopes: read operate publish sync admin).
[[auth.tokens]]
name = "admin"
token_sha256 = "{digest}"
scopes = ["admin"]

# An agent: make one with `agent-node agent new NAME`, build it, then either publish it to this
# node (`agent-node agent publish`) and deploy it (`agent-node agents deploy`), or name its
# component here. Writing agents: `agent-node docs agents`.
#
# [[agents]]
# name = "hello"
# component = "hello/build/hello.wasm"
# tick_interval_ms = 1000
"""


def register(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    init = documented_parser(
        actions,
        "init",
        "write a first runtime.toml (mode 0600) and print a new admin token once",
        __doc__ or "",
    )
    init.add_argument("--config", default="runtime.toml", help="file to write (runtime.toml)")
    init.add_argument("--name", default="node-1", help="the node's name (default node-1)")
    init.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT (127.0.0.1:8080)")
    init.set_defaults(func=cmd_config_init)


def render(name: str, listen: str, digest: str) -> str:
    return TEMPLATE.format(name=name, listen=listen, digest=digest)


def cmd_config_init(args: argparse.Namespace) -> int:
    from node.config.load import parse_config  # the whole config, aiohttp: CLI start-up time
    from node.web.auth import new_token, token_digest

    path = Path(args.config)
    if not AGENT_NAME_RE.fullmatch(args.name):
        print(f"agent-node: --name {args.name!r}: letters, digits, . _ -", file=sys.stderr)
        return 2
    token = new_token()
    text = render(args.name, args.listen, token_digest(token).hex())
    try:  # the same checks as at start: a bad --listen is refused here, not by the node
        parse_config({**_toml(text), "base_dir": str(path.resolve().parent)}, "config init")
    except ConfigError as exc:
        problem = str(exc).removeprefix("config init: ").replace("node.listen", "--listen")
        print(f"agent-node: {problem}", file=sys.stderr)
        return 2
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        print(
            f"agent-node: {path} exists; not overwritten (give another --config)", file=sys.stderr
        )
        return 1
    except OSError as exc:
        print(f"agent-node: cannot write {path}: {exc.strerror}", file=sys.stderr)
        return 1
    with os.fdopen(fd, "w") as out:
        out.write(text)
    print(f"wrote {path} (mode 0600)")
    print(f"admin token (shown only now; runtime.toml keeps its hash): {token}")
    print(f"start the node:  agent-node run --config {path}")
    print(
        f"then:            AGENT_NODE_TOKEN=<the token> agent-node status --url http://{args.listen}"
    )
    return 0


def _toml(text: str) -> dict[str, object]:
    import tomllib

    return tomllib.loads(text)
