"""`agent-node mesh nats-permissions|nats-config|init`: set-up helpers of a NATS mesh.

`nats-permissions` prints the nats-server users of a mesh, from its nodes' configs;
`nats-config` a whole nats-server config around them (JetStream, an optional cluster);
`init` (node/cli/mesh_init.py) writes every node's config and the server's from a list of
names and addresses.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from node.cli import mesh_init
from node.config.names import AGENT_NAME_RE, ConfigError
from node.sync.nats.permissions import Member, check_members, members_of, render
from node.sync.nats.server_config import ServerSettings, render_server


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mesh = sub.add_parser("mesh", help="mesh set-up helpers").add_subparsers(metavar="ACTION")
    permissions = mesh.add_parser(
        "nats-permissions",
        help="print the nats-server users and permissions of a mesh, from its nodes' configs",
    )
    _members_arguments(permissions)
    permissions.set_defaults(func=cmd_nats_permissions)
    config = mesh.add_parser(
        "nats-config",
        help="print a nats-server config for a mesh: JetStream and the generated permissions",
        description=(
            "A whole nats-server config: the server, JetStream (fsync before every\n"
            "acknowledgement), a cluster when --route is given, and the users and permissions\n"
            "`mesh nats-permissions` prints. Each user's password comes from nats-server's\n"
            "environment ($NODE_A_PASSWORD for the user node-a)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _members_arguments(config)
    defaults = ServerSettings()
    config.add_argument("--server-name", default=defaults.name, help="(nats-1)")
    config.add_argument(
        "--listen", default=defaults.listen, help=f"clients' HOST:PORT ({defaults.listen})"
    )
    config.add_argument(
        "--store-dir", default=defaults.store_dir, help=f"JetStream's folder ({defaults.store_dir})"
    )
    config.add_argument("--cluster", default=defaults.cluster, help="the cluster's name")
    config.add_argument("--cluster-listen", default="", help="routes' HOST:PORT (a cluster)")
    config.add_argument(
        "--route",
        action="append",
        default=[],
        metavar="URL",
        help="nats://HOST:PORT of each server's route listener (a cluster: give all, this one too)",
    )
    config.set_defaults(func=cmd_nats_config)
    mesh_init.register(mesh)


def _members_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "configs", nargs="*", metavar="CONFIG", help="each node's runtime.toml (one per node)"
    )
    parser.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME[=USER]",
        help="a node without a config at hand (its NATS user: its name unless given)",
    )
    parser.add_argument("--mesh", help="the mesh name when no config is given (default: default)")


def _members(args: argparse.Namespace) -> tuple[str, list[Member]]:
    """The mesh and its members, from the configs and `--node` given."""
    mesh, members = members_of([Path(p) for p in args.configs]) if args.configs else ("", [])
    if args.mesh and mesh and args.mesh != mesh:
        raise ConfigError(f"--mesh {args.mesh}: the configs name the mesh {mesh}")
    mesh = mesh or args.mesh or "default"
    for given in args.node:
        name, _, user = given.partition("=")
        if not AGENT_NAME_RE.fullmatch(name) or '"' in user or "\\" in user:
            raise ConfigError(f"--node {given}: not NAME or NAME=USER")
        members.append(Member(name, user or name))
    if not members:
        raise ConfigError("give at least one CONFIG or --node")
    check_members(members)
    return mesh, members


def cmd_nats_permissions(args: argparse.Namespace) -> int:
    mesh, members = _members(args)
    print(render(mesh, members), end="")
    return 0


def cmd_nats_config(args: argparse.Namespace) -> int:
    mesh, members = _members(args)
    server = ServerSettings(
        name=args.server_name,
        listen=args.listen,
        store_dir=args.store_dir,
        cluster=args.cluster,
        cluster_listen=args.cluster_listen,
        routes=args.route,
    )
    print(render_server(mesh, members, server), end="")
    return 0
