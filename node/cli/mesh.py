"""`agent-node mesh nats-permissions`: the nats-server users of a mesh, from its nodes' configs."""

from __future__ import annotations

import argparse
from pathlib import Path

from node.config.model import AGENT_NAME_RE, ConfigError
from node.sync.nats_permissions import Member, check_members, members_of, render


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mesh = sub.add_parser("mesh", help="mesh set-up helpers").add_subparsers(metavar="ACTION")
    permissions = mesh.add_parser(
        "nats-permissions",
        help="print the nats-server users and permissions of a mesh, from its nodes' configs",
    )
    permissions.add_argument(
        "configs", nargs="*", metavar="CONFIG", help="each node's runtime.toml (one per node)"
    )
    permissions.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME[=USER]",
        help="a node without a config at hand (its NATS user: its name unless given)",
    )
    permissions.add_argument(
        "--mesh", help="the mesh name when no config is given (default: default)"
    )
    permissions.set_defaults(func=cmd_nats_permissions)


def cmd_nats_permissions(args: argparse.Namespace) -> int:
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
    print(render(mesh, members), end="")
    return 0
