"""`agent-node mesh init`: a whole NATS mesh from one list of names and addresses.

    agent-node mesh init --out mesh node-a=127.0.0.1:8081 node-b=127.0.0.1:8082 node-c=...

writes one folder per node, ready for `agent-node run --config mesh/node-a/runtime.toml`:

- `runtime.toml` (0600): `[node]` (its name and address), the operator's admin token (its
  SHA-256; the token is printed once, the same for every node of the mesh), every other node as
  a `[[peers]]` entry (its URL, its pinned public key, the token this node presents to it) and
  the token each peer presents here (`[[auth.tokens]]`, scope `sync`), and `[mesh]` on NATS
  with this node's own NATS user;
- `data/node.key`: the node's key, made here so that every peer pins it from the start;
- `credentials/` (0700, files 0600): the peer tokens this node presents and its NATS password;

and `nats/nats-server.conf` (0600): one nats-server with JetStream and the users and
permissions of `agent-node mesh nats-permissions` for these nodes, their passwords defined in
it. Nothing is ever written over: the folder must not exist, or be empty.

Each folder belongs on its node's host (the nats folder on the NATS host); a folder holds that
node's secrets only. Walk-through: `agent-node docs deploy`, "A mesh of three nodes".
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from node.config.names import AGENT_NAME_RE, MESH_NAME, ConfigError
from node.sync.nats.permissions import Member
from node.sync.nats.server_config import (
    ServerSettings,
    host_port,
    listen_of,
    quotable,
    render_server,
)

DEFAULT_NATS = "nats://127.0.0.1:4222"
NATS_FOLDER = "nats"
CREDENTIALS = "credentials"
NATS_PASSWORD_FILE = f"{CREDENTIALS}/nats-password"


@dataclass(frozen=True)
class Planned:
    """A node of the mesh as given: its name and the HOST:PORT it listens on, which is also
    where the other nodes reach it."""

    name: str
    address: str

    @property
    def url(self) -> str:
        return f"http://{self.address}"


def planned_nodes(given: list[str]) -> list[Planned]:
    """`NAME=HOST:PORT` each, checked: names and addresses unique, no wildcard address."""
    nodes = []
    for entry in given:
        name, sep, address = entry.partition("=")
        if not sep or not AGENT_NAME_RE.fullmatch(name):
            raise ConfigError(f"{entry}: give NAME=HOST:PORT (a node name: letters, digits, . _ -)")
        host, _ = host_port(address, f"{name}=")
        if host in ("0.0.0.0", "::", ""):
            raise ConfigError(
                f"{entry}: give the address the other nodes reach {name} at, not a wildcard"
            )
        nodes.append(Planned(name, address))
    for attribute in ("name", "address"):
        values = [getattr(n, attribute) for n in nodes]
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ConfigError(f"two nodes share the {attribute} {twice[0]}")
    if len(nodes) < 2:
        raise ConfigError("a mesh needs at least two nodes")
    return nodes


def peer_token_file(peer: str) -> str:
    """Where a node keeps the token it presents to `peer`."""
    return f"{CREDENTIALS}/to-{peer}.token"


def node_toml(
    node: Planned,
    nodes: list[Planned],
    mesh: str,
    nats_url: str,
    admin_digest: str,
    received: dict[str, str],
    keys: dict[str, str],
    hosted: tuple[str, ...] = (),
) -> str:
    """One node's runtime.toml; `received[peer]` is the token `peer` presents to this node,
    `hosted` the placed agents every node consents to host (`[[hosting]]`)."""
    from node.web.auth import token_digest  # aiohttp: CLI start-up time

    others = [n for n in nodes if n.name != node.name]
    names = ", ".join(n.name for n in nodes)
    parts = [
        f"# runtime.toml of {node.name}, one of the mesh {mesh} ({names}), made by",
        "# `agent-node mesh init`. Every key: `agent-node docs configuration`; relative paths",
        "# are relative to this file's folder.",
        "",
        "[node]",
        f'name = "{node.name}"',
        f'listen = "{node.address}"',
        'data_dir = "data"',
        "",
        "# The operator's admin token, the same on every node of the mesh (printed once by",
        "# `mesh init`; only its SHA-256 is kept). More: `agent-node token new NAME --scopes ...`",
        "[[auth.tokens]]",
        'name = "admin"',
        f'token_sha256 = "{admin_digest}"',
        'scopes = ["admin"]',
    ]
    for peer in others:
        parts += [
            "",
            f"# {peer.name}: the token it presents here, and how this node reaches it",
            "[[auth.tokens]]",
            f'name = "{peer.name}"',
            f'token_sha256 = "{token_digest(received[peer.name]).hex()}"',
            'scopes = ["sync"]',
            "",
            "[[peers]]",
            f'name = "{peer.name}"',
            f'url = "{peer.url}"',
            f'token_file = "{peer_token_file(peer.name)}"',
            f'public_key = "{keys[peer.name]}"',
        ]
    parts += [
        "",
        "# Envelopes, leases, adverts and components travel through NATS JetStream",
        '# (`agent-node docs mesh`, "NATS JetStream transport" and "Placement and failover").',
        "[mesh]",
        'transport = "nats"',
        f'name = "{mesh}"',
        f'nats_servers = ["{nats_url}"]',
        f'nats_user = "{node.name}"',
        f'nats_password_file = "{NATS_PASSWORD_FILE}"',
    ]
    parts += [
        "",
        "# This node's consent to host a placed agent another node deploys, when it fails over",
        "# or moves here: without an entry it keeps the agent's journal and never runs it. Each",
        "# names the agent's owner (the node that deploys it): another node's agent of that",
        "# name is not hosted. Add the capabilities, approval rules and grant domains it may",
        "# have here, and pin its components by sha256 where it gets secrets",
        '# (`agent-node docs mesh`, "Consent").',
    ]
    for agent in hosted:  # "name@owner": an entry scoped to its owner's agent of that name
        name, _, owner = agent.partition("@")
        parts += ["[[hosting]]", f'agent = "{name}"', f'owner = "{owner}"', ""]
    return "\n".join(parts) + "\n"


def write_private(path: Path, text: str) -> None:
    """A new file only its owner may read (never over an existing one)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def fresh_folder(out: Path) -> None:
    """`out`, created (0700) or found empty: nothing of an earlier mesh is written over."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out}: exists and is not an empty folder; nothing written")
    out.mkdir(mode=0o700, parents=True, exist_ok=True)


def write_mesh(
    out: Path, nodes: list[Planned], mesh: str, nats_url: str, hosted: tuple[str, ...] = ()
) -> str:
    """Every file of the mesh under `out`; the admin token (to show once). On any failure
    nothing is left behind."""
    listen = listen_of(nats_url)
    if not quotable(nats_url):
        raise ConfigError(f"--nats {nats_url}: not nats://HOST:PORT")
    fresh_folder(out)
    try:
        return _write_mesh(out, nodes, mesh, nats_url, listen, hosted)
    except BaseException:
        for child in out.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
        raise


def _write_mesh(
    out: Path, nodes: list[Planned], mesh: str, nats_url: str, listen: str, hosted: tuple[str, ...]
) -> str:
    import secrets

    from eventstore.keys import load_or_create_key, public_key_multibase
    from node.config.load import load_config
    from node.web.auth import new_token, token_digest

    admin = new_token()
    admin_digest = token_digest(admin).hex()
    # (sender, receiver) → the token the sender presents to the receiver
    tokens = {(a.name, b.name): new_token() for a in nodes for b in nodes if a != b}
    passwords = {n.name: secrets.token_urlsafe(24) for n in nodes}
    keys = {}
    for node in nodes:
        folder = out / node.name
        folder.mkdir(mode=0o700)
        (folder / "data").mkdir(mode=0o700)
        (folder / CREDENTIALS).mkdir(mode=0o700)
        keys[node.name] = public_key_multibase(load_or_create_key(folder / "data").verify_key)
    for node in nodes:
        folder = out / node.name
        write_private(folder / NATS_PASSWORD_FILE, passwords[node.name] + "\n")
        received = {}
        for peer in (n for n in nodes if n != node):
            write_private(folder / peer_token_file(peer.name), tokens[node.name, peer.name] + "\n")
            received[peer.name] = tokens[peer.name, node.name]
        config = folder / "runtime.toml"
        toml = node_toml(node, nodes, mesh, nats_url, admin_digest, received, keys, hosted)
        write_private(config, toml)
        load_config(config)  # what the node will read at start: it loads, or this is a bug
    nats = out / NATS_FOLDER
    nats.mkdir(mode=0o700)
    server = ServerSettings(listen=listen, store_dir=str((nats / "jetstream").resolve()))
    members = [Member(n.name, n.name) for n in nodes]
    write_private(nats / "nats-server.conf", render_server(mesh, members, server, passwords))
    return admin


def register(mesh: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from node.cli.docs import documented_parser

    init = documented_parser(
        mesh,
        "init",
        "write the configs of a NATS mesh (a folder per node, and the nats-server's)",
        __doc__ or "",
    )
    init.add_argument(
        "nodes", nargs="+", metavar="NAME=HOST:PORT", help="each node: its name and address"
    )
    init.add_argument("--out", required=True, help="the folder to write (new, or empty)")
    init.add_argument(
        "--nats", default=DEFAULT_NATS, help=f"where the nodes reach nats-server ({DEFAULT_NATS})"
    )
    init.add_argument("--mesh", default="default", help="the mesh's name (default)")
    init.add_argument(
        "--host",
        default="",
        metavar="AGENT[@OWNER],...",
        help="placed agents every node consents to host ([[hosting]] entries scoped to the "
        "agent's owner, the node that deploys it: by default the first node named; none by "
        "default)",
    )
    init.set_defaults(func=cmd_mesh_init)


def owned_agents(given: str, nodes: list[Planned]) -> tuple[str, ...]:
    """`--host AGENT[@OWNER],...` as "agent@owner" each: the owner is the node that deploys
    the agent (default: the first node named), one of the mesh's."""
    names = {n.name for n in nodes}
    hosted = []
    for item in (part for part in given.split(",") if part):
        agent, _, owner = item.partition("@")
        owner = owner or nodes[0].name
        if not AGENT_NAME_RE.fullmatch(agent):
            raise ConfigError(f"--host {item[:80]!r}: not an agent name")
        if owner not in names:
            raise ConfigError(f"--host {item[:80]!r}: its owner {owner[:80]!r} is not a node named")
        hosted.append(f"{agent}@{owner}")
    return tuple(hosted)


def cmd_mesh_init(args: argparse.Namespace) -> int:
    if not re.search(MESH_NAME, args.mesh):
        raise ConfigError(f"--mesh {args.mesh}: letters, digits, _ and - (up to 32)")
    nodes = planned_nodes(args.nodes)
    hosted = owned_agents(args.host, nodes)
    out = Path(args.out)
    admin = write_mesh(out, nodes, args.mesh, args.nats, hosted)
    first = nodes[0]
    print(f"wrote {out}/: {', '.join(n.name for n in nodes)} and {NATS_FOLDER}/ (mode 0600 files)")
    print(f"admin token of every node (shown only now; the configs keep its hash): {admin}")
    print("start them (each node's folder belongs on its host):")
    print(f"  nats-server -c {out / NATS_FOLDER / 'nats-server.conf'} &")
    for node in nodes:
        print(f"  agent-node run --config {out / node.name / 'runtime.toml'} &")
    print(f"then:  AGENT_NODE_TOKEN=<the token> agent-node status --url {first.url}")
    return 0
