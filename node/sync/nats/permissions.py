"""The nats-server users of a mesh, generated from the nodes' configs (docs/mesh.md).

Each node's NATS user may publish envelopes on its own subject prefix only, write only its own
heads record, use only its own durable consumer, and receive replies only on its own inbox
prefix (`_INBOX_<hex(node)>`, the client's `inbox_prefix`), so no member reads another's
JetStream replies. The list follows what the node (nats-py 2.16) sends:

- a consumer with two or more filter subjects is created on
  `$JS.API.CONSUMER.CREATE.<stream>.<consumer>` (no filter token), one filter on
  `...<consumer>.<filter>`: both are allowed, for any mesh size;
- the stream and the heads bucket are read (info, last message by subject) and created when
  missing (the first node creates them; an existing one is never changed);
- placement (node/placement/): the leases bucket is read whole and written only under the
  node's own name (`<hex(agent)>.<hex(node)>`: no member can write, delete or hold another
  node's lease), the nodes bucket read whole and written only at the node's own key, the
  components object store read and written (chunks and metas; no purge, no delete: a forged
  meta is healed by the next put, node/placement/components.py).

Generated rather than hand-kept: `agent-node mesh nats-permissions CONFIG...` prints the block.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from node.config.names import AGENT_NAME_RE, MESH_NAME, ConfigError
from node.sync.nats.subjects import (
    Bucket,
    bucket_name,
    durable_name,
    heads_consumer_name,
    inbox_prefix,
    kv_stream,
    node_subjects,
    object_stream,
    stream_name,
    token,
)

_MESH_NAME_RE = re.compile(MESH_NAME)
# a NATS config variable is letters, digits and `_`
_NOT_VARIABLE = re.compile(r"[^A-Z0-9_]")


@dataclass(frozen=True)
class Member:
    """One node of the mesh and the NATS user it connects as."""

    node: str
    user: str

    @property
    def password_variable(self) -> str:
        """The environment variable nats-server reads the user's password from."""
        return _NOT_VARIABLE.sub("_", self.user.upper()) + "_PASSWORD"


def member_of(path: Path) -> tuple[str, Member]:
    """(mesh name, member) from a node's runtime.toml: `[node] name`, `[mesh] name` and
    `nats_user` only (the rest, secrets included, is neither needed nor read)."""
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    node = raw.get("node", {}).get("name") if isinstance(raw.get("node"), dict) else None
    mesh = raw.get("mesh", {}) if isinstance(raw.get("mesh"), dict) else {}
    if not isinstance(node, str) or not AGENT_NAME_RE.fullmatch(node):
        raise ConfigError(f"{path}: node.name: missing or not a node name")
    mesh_name = mesh.get("name", "default")
    if not isinstance(mesh_name, str) or not _MESH_NAME_RE.search(mesh_name):
        raise ConfigError(f"{path}: mesh.name: not a mesh name")
    user = mesh.get("nats_user", node)
    if not isinstance(user, str) or not user or '"' in user or "\\" in user:
        raise ConfigError(f"{path}: mesh.nats_user: not a usable NATS user name")
    return mesh_name, Member(node, user)


def members_of(paths: list[Path]) -> tuple[str, list[Member]]:
    """The mesh every config belongs to and its members; ConfigError when they disagree."""
    found = [member_of(path) for path in paths]
    meshes = {mesh for mesh, _ in found}
    if len(meshes) != 1:
        raise ConfigError(f"the configs name {len(meshes)} meshes: {', '.join(sorted(meshes))}")
    members = [member for _, member in found]
    check_members(members)
    return meshes.pop(), members


def check_members(members: list[Member]) -> None:
    for attribute in ("node", "user", "password_variable"):
        values = [getattr(m, attribute) for m in members]
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ConfigError(f"two members share the {attribute.replace('_', ' ')} {twice[0]}")


def publish_allowed(mesh: str, node: str) -> list[str]:
    stream, bucket, consumer = (
        stream_name(mesh),
        bucket_name(mesh, Bucket.HEADS),
        durable_name(node),
    )
    api = "$JS.API"
    return [
        node_subjects(mesh, node),  # its own envelopes only
        f"$KV.{bucket}.{token(node)}",  # its own heads record only
        f"{api}.INFO",
        f"{api}.STREAM.INFO.{stream}",
        f"{api}.STREAM.CREATE.{stream}",  # the first node creates it
        f"{api}.STREAM.MSG.GET.{stream}",  # its last envelope per journal; a duplicate's origin
        f"{api}.STREAM.INFO.KV_{bucket}",
        f"{api}.STREAM.CREATE.KV_{bucket}",
        f"{api}.DIRECT.GET.KV_{bucket}.>",  # every node's heads
        f"{api}.STREAM.MSG.GET.KV_{bucket}",
        f"{api}.CONSUMER.CREATE.{stream}.{consumer}",  # two or more filter subjects
        f"{api}.CONSUMER.CREATE.{stream}.{consumer}.>",  # one filter subject
        f"{api}.CONSUMER.DURABLE.CREATE.{stream}.{consumer}",
        f"{api}.CONSUMER.INFO.{stream}.{consumer}",
        f"{api}.CONSUMER.MSG.NEXT.{stream}.{consumer}",
        f"$JS.ACK.{stream}.{consumer}.>",
        *heads_follower_allowed(mesh, node),
        *placement_allowed(mesh, node),
    ]


def heads_follower_allowed(mesh: str, node: str) -> list[str]:
    """Its own consumer of the heads bucket's stream (nats/heads.py follows peers' records):
    created afresh (one filter in the subject, or several), deleted, pulled."""
    kv, follower = kv_stream(bucket_name(mesh, Bucket.HEADS)), heads_consumer_name(node)
    api = "$JS.API"
    return [
        f"{api}.CONSUMER.CREATE.{kv}.{follower}",
        f"{api}.CONSUMER.CREATE.{kv}.{follower}.>",
        f"{api}.CONSUMER.DELETE.{kv}.{follower}",
        f"{api}.CONSUMER.MSG.NEXT.{kv}.{follower}",
    ]


def placement_allowed(mesh: str, node: str) -> list[str]:
    """What node/placement/ sends: KV writes are publishes on the key's subject (create and
    compare-and-set are headers), reads are last-by-subject gets from the stream's leader."""
    leases, nodes, components = (
        bucket_name(mesh, Bucket.LEASES),
        bucket_name(mesh, Bucket.NODES),
        bucket_name(mesh, Bucket.COMPONENTS),
    )
    api = "$JS.API"
    allowed = [
        f"$KV.{leases}.*.{token(node)}",  # its own lease of any agent only
        f"$KV.{nodes}.{token(node)}",  # its own advert only
        f"$O.{components}.>",  # components' chunks and metas
    ]
    for stream in (kv_stream(leases), kv_stream(nodes), object_stream(components)):
        allowed += [
            f"{api}.STREAM.INFO.{stream}",
            f"{api}.STREAM.CREATE.{stream}",
            f"{api}.STREAM.MSG.GET.{stream}",
        ]
    return allowed


def subscribe_allowed(node: str) -> list[str]:
    return [f"{inbox_prefix(node)}.>"]  # its own replies only


def render(mesh: str, members: list[Member]) -> str:
    """The nats-server `authorization` block for the mesh, passwords from the environment."""
    check_members(members)
    names = ", ".join(f"{m.node} (user {m.user})" for m in members)
    lines = [
        '# Generated by `agent-node mesh nats-permissions` (docs/mesh.md, "Generated',
        '# permissions"); generate it again when nodes join or leave, do not edit it by hand.',
        f'# Mesh "{mesh}": {names}.',
        "# Each node may publish envelopes only on its own subject prefix, write only its own",
        "# heads record, read the stream through its own durable consumer, and receive replies",
        "# only on its own inbox prefix ([mesh] nats_user; the node sets the prefix itself).",
        "# Placement: its own lease records and advert only, any component (by checksum).",
        "# Passwords come from nats-server's environment (the variables below, unquoted), or",
        "# write bcrypt hashes in their place (`nats server passwd`).",
        "",
        "authorization {",
        "  users: [",
    ]
    for m in members:
        lines.append(f'    {{ user: "{m.user}", password: ${m.password_variable}, permissions: {{')
        lines.append("        publish: { allow: [")
        lines += [f'          "{s}"' for s in publish_allowed(mesh, m.node)]
        lines.append("        ] }")
        lines.append("        subscribe: { allow: [")
        lines += [f'          "{s}"' for s in subscribe_allowed(m.node)]
        lines.append("        ] }")
        lines.append("      } }")
    lines += ["  ]", "}", ""]
    return "\n".join(lines)
