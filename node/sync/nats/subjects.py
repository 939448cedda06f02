"""Names on the NATS side of a mesh: stream, subjects, consumer, key-value bucket, message ids.

Journal and node names may hold `.` (a NATS token separator), and `@` key journals, so each is
written into a subject as the lower-case hex of its UTF-8 bytes: reversible, and only
`[0-9a-f]` (`alpha` → `616c706861`). One subject per origin node and journal:

    mesh.<mesh>.env.<hex(node)>.<hex(journal)>

so a node's NATS user can be allowed to publish on `mesh.<mesh>.env.<hex(node)>.>` only. A
node's lease log of a journal (node/placement/leaselog.py: its signed lease records, in the
stream so that a takeover is judged by the stream alone) is one token longer, under the same
permission and the stream's same subjects:

    mesh.<mesh>.env.<hex(node)>.<hex(journal)>.lease

`parse_subject` answers None for it (it is no envelope subject); `parse_lease_subject` reads it.

The mesh's stream is `MESH_<mesh>`, each of its buckets `MESH_<mesh>_<BUCKET>`; NATS keeps a
key-value bucket in the stream `KV_<bucket>` (a key's subject `$KV.<bucket>.<key>`) and an
object store in `OBJ_<bucket>`.
"""

from __future__ import annotations

from enum import StrEnum

MSG_ID_HEADER = "Nats-Msg-Id"
LEASE_TOKEN = "lease"


class Bucket(StrEnum):
    HEADS = "HEADS"  # key-value: each node's heads record (key: hex of the node's name)
    LEASES = "LEASES"  # key-value: the agents' leases (key: hex of the agent's name)
    NODES = "NODES"  # key-value: the nodes' adverts (key: hex of the node's name)
    COMPONENTS = "COMPONENTS"  # object store: the agents' components (object: sha256 hex)


def token(name: str) -> str:
    return name.encode().hex()


def name_of(hex_token: str) -> str:
    """ValueError when the token is not hex of UTF-8."""
    return bytes.fromhex(hex_token).decode()


def stream_name(mesh: str) -> str:
    return f"MESH_{mesh}"


def bucket_name(mesh: str, bucket: Bucket) -> str:
    return f"{stream_name(mesh)}_{bucket}"


def kv_stream(bucket: str) -> str:
    return f"KV_{bucket}"


def kv_subject(bucket: str, key: str) -> str:
    return f"$KV.{bucket}.{key}"


def object_stream(bucket: str) -> str:
    return f"OBJ_{bucket}"


def all_subjects(mesh: str) -> str:
    return f"mesh.{mesh}.env.>"


def node_subjects(mesh: str, node: str) -> str:
    """Every subject `node` may publish on (its NATS permission)."""
    return f"mesh.{mesh}.env.{token(node)}.>"


def envelope_subjects(mesh: str, node: str | None = None) -> str:
    """`node`'s envelope subjects (every node's, None): not its lease logs, one token longer."""
    return f"mesh.{mesh}.env.{token(node) if node is not None else '*'}.*"


def subject(mesh: str, node: str, journal: str) -> str:
    return f"mesh.{mesh}.env.{token(node)}.{token(journal)}"


def parse_subject(mesh: str, text: str) -> tuple[str, str] | None:
    """(origin node, journal) of an envelope subject, or None when it is not one."""
    prefix = f"mesh.{mesh}.env."
    if not text.startswith(prefix):
        return None
    parts = text[len(prefix) :].split(".")
    if len(parts) != 2:
        return None
    try:
        return name_of(parts[0]), name_of(parts[1])
    except (ValueError, UnicodeDecodeError):
        return None


def lease_subject(mesh: str, node: str, journal: str) -> str:
    return f"{subject(mesh, node, journal)}.{LEASE_TOKEN}"


def parse_lease_subject(mesh: str, text: str) -> tuple[str, str] | None:
    """(holder node, journal) of a lease log subject, or None when it is not one."""
    head, dot, last = text.rpartition(".")
    if not dot or last != LEASE_TOKEN:
        return None
    return parse_subject(mesh, head)


def durable_name(node: str) -> str:
    """The node's consumer of the mesh's stream."""
    return f"node-{token(node)}"


def heads_consumer_name(node: str) -> str:
    """The node's consumer of the heads bucket's stream (nats/heads.py): its peers' records."""
    return f"heads-{token(node)}"


def msg_id(origin: str, journal: str, first: int, last: int) -> str:
    """The id of a message holding `journal`'s envelopes first..last published by `origin`:
    the server drops a second message with the same id inside its duplicate window. It names
    the origin, though the server de-duplicates per stream, not per subject: a member can still
    publish an id first (nats/publisher.py checks every `duplicate` answer)."""
    return f"{origin}:{journal}:{first}-{last}"


def seq_of_msg_id(text: str) -> int | None:
    """The last seq a message id covers: `origin:journal:first-last` (and a `~...` suffix on a
    republish under a fresh id), or the single-envelope `journal:seq` of earlier versions."""
    text = text.partition("~")[0]
    _, _, covered = text.rpartition(":")
    _, _, seq = covered.rpartition("-")
    return int(seq) if seq.isdigit() and len(seq) <= 19 else None


def inbox_prefix(node: str) -> str:
    """The node's reply subjects (nats-py's `inbox_prefix`): its NATS user may subscribe to
    `<prefix>.>` only, so no member reads another's JetStream replies."""
    return f"_INBOX_{token(node)}"
