"""A stream's settings against the ones this node creates it with, setting by setting.

Every stream and bucket the node uses may have been made first by someone else (an operator,
an older version, a member of the mesh): narrowed subjects make every write fail, a work queue
drops what is read, a cap on messages or bytes discards what was acknowledged, a mirror or a
sealed stream takes nothing. `differences` names each such setting as `nats stream info` does;
the placement buckets refuse a bucket with any (node/placement/buckets.py), the mesh's stream
and heads bucket are used anyway and reported (node/sync/nats/link.py): replication must go on.
"""

from __future__ import annotations

from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig


def differences(found: StreamConfig, wanted: StreamConfig) -> list[str]:
    """Each setting of `found` that is not what this node would create (`wanted`), named as
    `nats stream info` names it: subjects exactly, limits, retention, discard, storage,
    replicas, and no mirror, sources, republish or subject transform."""
    wrong: list[str] = []
    if found.sealed:
        wrong.append("it is sealed (it takes no message)")
    if sorted(found.subjects or []) != sorted(wanted.subjects or []):
        wrong.append(f"its subjects are {found.subjects}, not {wanted.subjects}")
    for setting in ("max_msgs", "max_bytes", "max_msgs_per_subject", "max_consumers"):
        have, want = _limit(getattr(found, setting)), _limit(getattr(wanted, setting))
        if have != want:
            wrong.append(f"its {setting} is {_shown(have)}, not {_shown(want)}")
    if wanted.max_msg_size is not None and found.max_msg_size != wanted.max_msg_size:
        wrong.append(f"its max_msg_size is {found.max_msg_size}, not {wanted.max_msg_size}")
    policies: tuple[tuple[str, object], ...] = (
        ("retention", RetentionPolicy.LIMITS),
        ("discard", DiscardPolicy.OLD),
        ("storage", StorageType.FILE),
    )
    for setting, default in policies:
        found_policy = getattr(found, setting) or default
        wanted_policy = getattr(wanted, setting) or default
        if found_policy != wanted_policy:
            wrong.append(f"its {setting} is {_shown(found_policy)}, not {_shown(wanted_policy)}")
    if (found.num_replicas or 1) != (wanted.num_replicas or 1):
        wrong.append(f"its num_replicas is {found.num_replicas}, not {wanted.num_replicas}")
    for setting in ("mirror", "sources", "republish", "subject_transform"):
        if getattr(found, setting):
            wrong.append(f"it has a {setting}")
    return wrong


def _limit(value: int | None) -> int:
    return value if value is not None and value > 0 else -1  # the server's "unlimited"


def _shown(value: object) -> str:
    if isinstance(value, int) and value == -1:
        return "unlimited"
    return str(getattr(value, "value", value))
